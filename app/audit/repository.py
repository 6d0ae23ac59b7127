"""SQL for the audit trail."""

from __future__ import annotations

from datetime import datetime
from typing import Any

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


def listed(query: Select[AuditEvent]) -> Select[*tuple[Any, ...]]:
    """Events as the columns a list shows (no entities to build), with their tenant's slug
    joined as ``slug``: a page in one statement."""
    return query.with_only_columns(
        AuditEvent.id, AuditEvent.occurred_at, AuditEvent.actor_label, AuditEvent.action,
        AuditEvent.target_type, AuditEvent.target_id, AuditEvent.before, AuditEvent.after,
        AuditEvent.request_id, Tenant.slug,
    ).outerjoin(Tenant, Tenant.id == AuditEvent.tenant_id)
