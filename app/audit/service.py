"""Recording audit events. Every state change calls ``record`` in the same transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.logs import request_id_var

# Keys whose values never reach the audit trail, whatever the caller passes.
_SECRET_KEYS = frozenset(
    {"token", "secret", "password", "kubeconfig", "client_secret", "token_hash", "config"}
)


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
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditEvent:
    event = AuditEvent(
        action=action,
        actor_id=actor_id,
        actor_label=actor_label,
        tenant_id=tenant_id,
        target_type=target_type,
        target_id=str(target_id),
        before=scrub(before),
        after=scrub(after),
        request_id=request_id_var.get(),
    )
    db.add(event)
    return event
