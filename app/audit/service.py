"""Recording audit events. Every state change calls ``record`` in the same transaction.

The audit log's API and page, which show a principal the events of the tenants it manages, are
in ``app.pages`` (they need auth and tenants, which record here).
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table
from sqlalchemy.orm import Session

from app.audit import events, readable, repository
from app.audit.models import AuditEvent
from app.audit.schemas import AuditFilters
from app.database.prepared import PreparedInsert
from app.http.pagination import PageParams
from app.kit.logs import request_id_var

# Keys whose values never reach the audit trail, whatever the caller passes.
_SECRET_KEYS = frozenset(
    {"token", "secret", "password", "kubeconfig", "client_secret", "token_hash", "config"}
)


TARGET_ID_MAX = 255  # the column's width
TARGET_LABEL_MAX = 300

# A statement, not an ORM object: nothing reads an event back in the transaction that wrote
# it, and the unit of work's flush of one row cost about half again what the insert does.
_INSERT = PreparedInsert(cast(Table, AuditEvent.__table__))


def scrub(values: dict[str, Any] | None) -> dict[str, Any] | None:
    if values is None:
        return None
    return {k: ("[redacted]" if k in _SECRET_KEYS else v) for k, v in values.items()}


def record(
    db: Session,
    *,
    action: str,
    actor_id: int | None,
    actor_label: str = "",
    tenant_id: int | None = None,
    target_type: str = "",
    target_id: str | int = "",
    target_label: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> None:
    """Written at once, in the session's transaction: it commits or rolls back with it, and
    so does what its listeners (``events.recorded``) write."""
    row: dict[str, Any] = {
        "action": action,
        "actor_id": actor_id,
        "actor_label": actor_label,
        "tenant_id": tenant_id,
        "target_type": target_type,
        # A denial's target is the request path, which a caller can make any length.
        "target_id": str(target_id)[:TARGET_ID_MAX],
        "target_label": target_label[:TARGET_LABEL_MAX],
        "before": scrub(before),
        "after": scrub(after),
        "request_id": request_id_var.get(),
    }
    _INSERT.add(db, row)
    events.recorded.fire(db, events.Recorded(action, tenant_id, target_type, row["target_id"],
                                             row["target_label"], row["after"]))


def page_of_events(db: Session, tenant_ids: list[int] | None, filters: AuditFilters,
                   params: PageParams, *, for_reading: bool = False,
                   ) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the events of these tenants (None: all), newest first, as ``AuditEventOut``
    fields; ``for_reading`` adds what the page shows: the tenant's name, the target's name and
    the changed fields."""
    rows, cursor = repository.listed_page(
        db, params, tenant_ids=tenant_ids, actor=filters.actor, action=filters.action,
        since=filters.since, until=filters.until, sign_ins=filters.sign_ins,
    )
    if for_reading:
        return [_readable_fields(row) for row in rows], cursor
    return [event_fields(row, row.slug) for row in rows], cursor


def _readable_fields(row: Any) -> dict[str, Any]:
    return {**event_fields(row, row.slug), "tenant_name": row.tenant_name,
            "target": readable.target_name(row.target_type, row.target_id, row.target_label),
            "changes": readable.changes(row.before, readable.without_tally(row.after)),
            "tally": readable.tally(row.after)}


def event_fields(event: Any, slug: str | None) -> dict[str, Any]:
    """``AuditEventOut``'s fields, from an event or a row of its columns, as plain values."""
    return {"id": event.id, "occurred_at": event.occurred_at,
            "actor": event.actor_label or "system", "tenant": slug, "action": event.action,
            "target_type": event.target_type, "target_id": event.target_id,
            "target_label": event.target_label,
            "before": event.before, "after": event.after, "request_id": event.request_id}
