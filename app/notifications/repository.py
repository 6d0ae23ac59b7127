"""The outbox's SQL: notifications and their deliveries written as statements (no ORM flush:
they are written from inside the audit trail's ``record``), and what fan-out reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Table, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.database.prepared import PreparedInsert
from app.notifications.models import (
    Notification,
    NotificationDelivery,
    NotificationPreference,
    WebhookEndpoint,
)

_NOTIFICATIONS = cast(Table, Notification.__table__)
_DELIVERIES = cast(Table, NotificationDelivery.__table__)
_ADD_NOTIFICATION = PreparedInsert(_NOTIFICATIONS, returning=[_NOTIFICATIONS.c.id])


def add_notification(db: Session, values: Mapping[str, Any]) -> int:
    row = _ADD_NOTIFICATION.add(db, values)
    return int(row.id)


def add_notification_once(db: Session, values: Mapping[str, Any]) -> int | None:
    """The new row's id, or None when a row of its ``dedupe_key`` exists already."""
    statement = _dialect(db).insert(_NOTIFICATIONS).values(dict(values)).on_conflict_do_nothing(
        index_elements=[_NOTIFICATIONS.c.dedupe_key]).returning(_NOTIFICATIONS.c.id)
    found = db.execute(statement).scalar_one_or_none()
    return int(found) if found is not None else None


def notification_by_key_for_update(db: Session, dedupe_key: str) -> Any:
    """(id, payload) of the row of this key, locked until the transaction ends."""
    return db.execute(select(Notification.id, Notification.payload)
                      .where(Notification.dedupe_key == dedupe_key)
                      .with_for_update()).one_or_none()


def replace_payload(db: Session, notification_id: int, payload: dict[str, Any]) -> None:
    db.execute(update(Notification).where(Notification.id == notification_id)
               .values(payload=payload).execution_options(synchronize_session=False))


def add_deliveries(db: Session, rows: Sequence[Mapping[str, Any]]) -> None:
    """A delivery per (notification, destination) once: fanning out again adds nothing."""
    if rows:
        db.execute(_dialect(db).insert(_DELIVERIES).on_conflict_do_nothing(
            index_elements=[_DELIVERIES.c.notification_id, _DELIVERIES.c.destination]),
            list(rows))


def _dialect(db: Session) -> Any:
    return postgresql if db.get_bind().dialect.name == "postgresql" else sqlite


def emails_off(db: Session, user_ids: Sequence[int], kind: str) -> set[int]:
    """Those of the users who turned email off for this kind."""
    if not user_ids:
        return set()
    return set(db.scalars(select(NotificationPreference.user_id).where(
        NotificationPreference.kind == kind, NotificationPreference.user_id.in_(user_ids),
        NotificationPreference.email.is_(False))))


def enabled_endpoints(db: Session, tenant_id: int | None) -> list[Any]:
    """(id, kinds) of the tenant's endpoints (None: the platform's) that are not disabled."""
    owner = (WebhookEndpoint.tenant_id.is_(None) if tenant_id is None
             else WebhookEndpoint.tenant_id == tenant_id)
    return list(db.execute(select(WebhookEndpoint.id, WebhookEndpoint.kinds).where(
        owner, WebhookEndpoint.disabled.is_(False)).order_by(WebhookEndpoint.id)).all())


def pending_counts(db: Session, destinations: Sequence[str]) -> dict[str, int]:
    if not destinations:
        return {}
    query = (select(NotificationDelivery.destination, func.count())
             .where(NotificationDelivery.destination.in_(destinations),
                    NotificationDelivery.state == "pending")
             .group_by(NotificationDelivery.destination))
    return {destination: int(count) for destination, count in db.execute(query).all()}
