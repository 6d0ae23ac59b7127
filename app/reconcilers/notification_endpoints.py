"""A webhook endpoint's health as its deliveries go: ``FAILING_AFTER`` failures in a row over
at least ``FAILING_FOR`` mark it failing (audited, shown to whoever registered it); one
success marks it ok again."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from app.audit import service as audit
from app.notifications.models import WebhookEndpoint
from app.notifications.outcomes import bounded

log = logging.getLogger(__name__)

ACTOR = "notifications"
TARGET_TYPE = "webhook_endpoint"
FAILING_AFTER = 5
FAILING_FOR = timedelta(minutes=15)


def endpoint_succeeded(db: Session, endpoint_id: int, now: datetime) -> None:
    row = db.get(WebhookEndpoint, endpoint_id, with_for_update=True)
    if row is None:
        return
    was = row.state
    row.state, row.consecutive_failures, row.failing_since = "ok", 0, None
    row.last_error, row.last_success_at = "", now
    if was == "failing":
        log.info("webhook endpoint %s answers again", row.id)
        _audit(db, row, "webhook_endpoint.recovered", was)


def endpoint_failed(db: Session, endpoint_id: int, error: str, now: datetime) -> None:
    row = db.get(WebhookEndpoint, endpoint_id, with_for_update=True)
    if row is None:
        return
    row.consecutive_failures += 1
    row.failing_since = row.failing_since or now
    row.last_error = bounded(error)
    if (row.state == "ok" and row.consecutive_failures >= FAILING_AFTER
            and now - row.failing_since >= FAILING_FOR):
        row.state = "failing"
        log.warning("webhook endpoint %s is failing: %s", row.id, row.last_error)
        _audit(db, row, "webhook_endpoint.failing", "ok")


def _audit(db: Session, row: WebhookEndpoint, action: str, was: str) -> None:
    audit.record(db, action=action, actor_id=None, actor_label=ACTOR, target_type=TARGET_TYPE,
                 target_id=row.id, target_label=f"webhook {row.name}",
                 tenant_id=row.tenant_id, before={"state": was},
                 after={"state": row.state, "consecutive_failures": row.consecutive_failures,
                        "last_error": row.last_error})
