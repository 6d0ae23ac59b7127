"""SQL for the audit trail."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    String,
    bindparam,
    column,
    func,
    select,
    table,
)
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.database.prepared import OneOf
from app.http.pagination import KeysetPage, PageParams

# A read model of the tenants domain's table: the slug and name a listed event shows (the audit
# trail is below every domain that records into it, tenants included).
tenants = table("tenants", column("id", Integer), column("slug", String),
                column("display_name", String))

# Every sign-in records one event: the log hides them unless asked, so that they do not bury
# the changes. A failed sign-in is not among them: it stays in view.
SIGN_IN = "auth.sign_in"


def events_query(
    *,
    tenant_ids: list[int] | None,
    actor: str | None = None,
    action: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    sign_ins: bool = True,
) -> Select[AuditEvent]:
    shape = _shape_of(tenant_ids, actor, action, since, until, sign_ins)
    in_tenants = AuditEvent.tenant_id.in_(tenant_ids or [])
    return _events(shape, in_tenants, actor.lower() if actor else None, action, since, until)


@dataclass(frozen=True)
class _Shape:
    """Which filters a query has."""

    by_tenant: bool
    by_actor: bool
    action: Literal["family", "exact"] | None
    since: bool
    until: bool
    sign_ins: bool


def _shape_of(tenant_ids: list[int] | None, actor: str | None, action: str | None,
              since: datetime | None, until: datetime | None, sign_ins: bool) -> _Shape:
    # A trailing dot filters a family: "quota." matches every quota action.
    family: Literal["family", "exact"] | None = None
    if action:
        family = "family" if action.endswith(".") else "exact"
    return _Shape(tenant_ids is not None, bool(actor), family, since is not None,
                  until is not None, sign_ins)


def _events(shape: _Shape, in_tenants: ColumnElement[bool], actor: Any, action: Any,
            since: Any, until: Any) -> Select[AuditEvent]:
    """Events filtered as ``shape`` says, by values or by bound parameters."""
    query = select(AuditEvent)
    if shape.by_tenant:
        query = query.where(in_tenants)
    if shape.by_actor:
        query = query.where(func.lower(AuditEvent.actor_label) == actor)
    if shape.action == "family":
        query = query.where(AuditEvent.action.startswith(action))
    elif shape.action == "exact":
        query = query.where(AuditEvent.action == action)
    if shape.since:
        query = query.where(AuditEvent.occurred_at >= since)
    if shape.until:
        query = query.where(AuditEvent.occurred_at < until)
    if not shape.sign_ins:
        query = query.where(AuditEvent.action != SIGN_IN)
    return query


def listed(query: Select[AuditEvent]) -> Select[*tuple[Any, ...]]:
    """Events as the columns a list shows (no entities to build), with their tenant's slug and
    name joined as ``slug`` and ``tenant_name``: a page in one statement."""
    return query.with_only_columns(
        AuditEvent.id, AuditEvent.occurred_at, AuditEvent.actor_label, AuditEvent.action,
        AuditEvent.target_type, AuditEvent.target_id, AuditEvent.target_label,
        AuditEvent.before, AuditEvent.after, AuditEvent.request_id, tenants.c.slug,
        tenants.c.display_name.label("tenant_name"),
    ).outerjoin(tenants, tenants.c.id == AuditEvent.tenant_id)


# One per combination of filters (at most 96), built on first use.
_PAGES: dict[_Shape, KeysetPage] = {}


def listed_page(db: Session, params: PageParams, *, tenant_ids: list[int] | None,
                actor: str | None = None, action: str | None = None,
                since: datetime | None = None, until: datetime | None = None,
                sign_ins: bool = True) -> tuple[Sequence[Any], str | None]:
    """A page of ``listed(events_query(...))``, newest first, its statement built once per
    combination of filters (see ``app.http.pagination.KeysetPage``)."""
    shape = _shape_of(tenant_ids, actor, action, since, until, sign_ins)
    page = _PAGES.get(shape)
    if page is None:
        query = _events(shape, OneOf(AuditEvent.tenant_id, "tenant_ids"), bindparam("actor"),
                        bindparam("action"), bindparam("since"), bindparam("until"))
        page = _PAGES[shape] = KeysetPage(listed(query), AuditEvent.id, newest_first=True)
    values = {"tenant_ids": tenant_ids, "actor": actor.lower() if actor else None,
              "action": action or None, "since": since, "until": until}
    return page.rows(db, params, {name: value for name, value in values.items()
                                  if value is not None})
