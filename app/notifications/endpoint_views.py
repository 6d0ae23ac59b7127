"""A webhook endpoint as its page and the API show it: its health, its queue and its latest
deliveries; never its secret."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.notifications.endpoint_schemas import DeliveryOut, EndpointOut
from app.notifications.models import Notification, NotificationDelivery, WebhookEndpoint

RECENT = 10


def described(db: Session, rows: Sequence[WebhookEndpoint], tenant: str | None
              ) -> list[EndpointOut]:
    ids = [row.id for row in rows]
    counts = _counts(db, ids)
    emails = _emails(db, [row.created_by_id for row in rows if row.created_by_id])
    return [EndpointOut(
        id=row.id, tenant=tenant, name=row.name, url=row.url,
        format="slack" if row.format == "slack" else "cloudevents", kinds=row.kinds,
        disabled=row.disabled, state="failing" if row.state == "failing" else "ok",
        failing_since=row.failing_since, consecutive_failures=row.consecutive_failures,
        last_error=row.last_error, last_success_at=row.last_success_at,
        created_at=row.created_at, created_by=emails.get(row.created_by_id or 0),
        previous_secret_until=row.previous_until if row.previous_secret_sealed else None,
        pending=counts.get((row.id, "pending"), 0), dropped=counts.get((row.id, "dropped"), 0),
        recent_deliveries=_recent(db, row.id)) for row in rows]


def _counts(db: Session, ids: list[int]) -> dict[tuple[int, str], int]:
    if not ids:
        return {}
    query = (select(NotificationDelivery.endpoint_id, NotificationDelivery.state, func.count())
             .where(NotificationDelivery.endpoint_id.in_(ids),
                    NotificationDelivery.state.in_(("pending", "dropped")))
             .group_by(NotificationDelivery.endpoint_id, NotificationDelivery.state))
    return {(int(endpoint_id or 0), state): int(count)
            for endpoint_id, state, count in db.execute(query).all()}


def _emails(db: Session, user_ids: list[int]) -> dict[int, str]:
    if not user_ids:
        return {}
    found = db.execute(select(User.id, User.email).where(User.id.in_(user_ids))).all()
    return {int(user_id): str(email) for user_id, email in found}


def _recent(db: Session, endpoint_id: int) -> list[DeliveryOut]:
    rows = db.execute(
        select(NotificationDelivery.id, Notification.kind, NotificationDelivery.state,
               NotificationDelivery.attempts, Notification.created_at,
               NotificationDelivery.delivered_at, NotificationDelivery.last_error)
        .join(Notification, Notification.id == NotificationDelivery.notification_id)
        .where(NotificationDelivery.endpoint_id == endpoint_id)
        .order_by(NotificationDelivery.id.desc()).limit(RECENT)).all()
    return [DeliveryOut(id=row.id, kind=row.kind, state=row.state, attempts=row.attempts,
                        created_at=row.created_at, delivered_at=row.delivered_at,
                        last_error=row.last_error) for row in rows]
