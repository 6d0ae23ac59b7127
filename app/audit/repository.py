"""SQL for the audit trail."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Select, func, select

from app.audit.models import AuditEvent
from app.tenants.models import Tenant


def events_query(
    *,
    tenant_ids: list[int] | None,
    actor: str | None = None,
    action: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Select[AuditEvent]:
    query = select(AuditEvent)
    if tenant_ids is not None:
        query = query.where(AuditEvent.tenant_id.in_(tenant_ids))
    if actor:
        query = query.where(func.lower(AuditEvent.actor_label) == actor.lower())
    if action:
        # A trailing dot filters a family: "quota." matches every quota action.
        query = query.where(AuditEvent.action.startswith(action) if action.endswith(".")
                            else AuditEvent.action == action)
    if since is not None:
        query = query.where(AuditEvent.occurred_at >= since)
    if until is not None:
        query = query.where(AuditEvent.occurred_at < until)
    return query


def with_tenant_slug(query: Select[AuditEvent]) -> Select[AuditEvent, str | None]:
    """Events with their tenant's slug, joined: a page in one statement."""
    return query.add_columns(Tenant.slug).outerjoin(Tenant, Tenant.id == AuditEvent.tenant_id)
