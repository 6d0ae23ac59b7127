"""The outbox, its deliveries, the webhook endpoints they go to and each person's choices."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import uuid4

from sqlalchemy import (
    JSON,
    CheckConstraint,
    ForeignKey,
    Index,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.database.core import Base, utcnow

CHANNELS = ("email", "webhook")
DELIVERY_STATES = ("pending", "delivered", "failed", "dropped", "expired")
FORMATS = ("slack", "cloudevents")
ENDPOINT_STATES = ("ok", "failing")

KIND_MAX = 40
DESTINATION_MAX = 40
LAST_ERROR_MAX = 300
URL_MAX = 2048


def new_uid() -> str:
    return str(uuid4())


class Notification(Base):
    """One thing that happened, told once: every message of it carries ``uid``, so a receiver
    drops a repeat by it."""

    __tablename__ = "notifications"

    id: Mapped[int] = mapped_column(primary_key=True)
    uid: Mapped[str] = mapped_column(String(36), unique=True, default=new_uid)
    kind: Mapped[str] = mapped_column(String(KIND_MAX))
    # The tenant the event is about; NULL for the platform's own (a host, a machine).
    tenant_id: Mapped[int | None] = mapped_column(
        ForeignKey("tenants.id", ondelete="SET NULL"), index=True)
    subject_type: Mapped[str] = mapped_column(String(50))
    subject_id: Mapped[str] = mapped_column(String(64))
    # Time-based events (a scan) and digests: one row per key, whatever the rescans.
    dedupe_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    # An allowlist of fields per kind (``emit.py``): names, numbers, times, a page path.
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    mandatory: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # A digest's window end: not sent before; NULL: at once.
    deliver_after: Mapped[datetime | None]


class NotificationDelivery(Base):
    """One notification to one destination: a person's email or an endpoint."""

    __tablename__ = "notification_deliveries"
    __table_args__ = (
        CheckConstraint("channel IN ('email', 'webhook')", name="channel"),
        CheckConstraint(
            "state IN ('pending', 'delivered', 'failed', 'dropped', 'expired')", name="state"),
        CheckConstraint("attempts >= 0", name="attempts_non_negative"),
        UniqueConstraint("notification_id", "destination"),
        # A destination's queue: what is pending and due, in order.
        Index("ix_notification_deliveries_due", "destination", "state", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    notification_id: Mapped[int] = mapped_column(
        ForeignKey("notifications.id", ondelete="CASCADE"))
    channel: Mapped[str] = mapped_column(String(10))
    user_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True)
    endpoint_id: Mapped[int | None] = mapped_column(
        ForeignKey("webhook_endpoints.id", ondelete="CASCADE"), index=True)
    # "email:<user id>" or "webhook:<endpoint id>": the queue's key, one worker at a time.
    destination: Mapped[str] = mapped_column(String(DESTINATION_MAX))
    state: Mapped[str] = mapped_column(String(10), default="pending")
    attempts: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Set (and committed) before a send: a worker that dies after it is resent by the next.
    sending_since: Mapped[datetime | None]
    delivered_at: Mapped[datetime | None]
    last_error: Mapped[str] = mapped_column(String(LAST_ERROR_MAX), default="")


class WebhookEndpoint(Base):
    """Where a tenant's (or, with no tenant, the platform's) notifications are posted."""

    __tablename__ = "webhook_endpoints"
    __table_args__ = (
        CheckConstraint("format IN ('slack', 'cloudevents')", name="format"),
        CheckConstraint("state IN ('ok', 'failing')", name="state"),
        CheckConstraint("consecutive_failures >= 0", name="failures_non_negative"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int | None] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    url: Mapped[str] = mapped_column(String(URL_MAX))
    format: Mapped[str] = mapped_column(String(20))
    # SecretBox ciphertext of the signing secret; the previous one while a roll overlaps.
    secret_sealed: Mapped[str] = mapped_column(Text)
    previous_secret_sealed: Mapped[str | None] = mapped_column(Text)
    previous_until: Mapped[datetime | None]
    # The kinds it receives; NULL: every kind of its tenant (or of the platform).
    kinds: Mapped[list[Any] | None] = mapped_column(JSON)
    created_by_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    state: Mapped[str] = mapped_column(String(10), default="ok")
    failing_since: Mapped[datetime | None]
    consecutive_failures: Mapped[int] = mapped_column(default=0)
    last_error: Mapped[str] = mapped_column(String(LAST_ERROR_MAX), default="")
    last_success_at: Mapped[datetime | None]
    disabled: Mapped[bool] = mapped_column(default=False)


class NotificationPreference(Base):
    """A person's choice for one kind; no row: email on."""

    __tablename__ = "notification_preferences"

    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(KIND_MAX), primary_key=True)
    email: Mapped[bool]
