"""Delivering the outbox, one destination per key: a person's email or a webhook endpoint.

A reconcile claims up to ``BATCH`` due pending deliveries of its destination in a fenced
transaction, marks them ``sending_since`` with one more attempt and commits before sending: a
worker killed while sending leaves them pending, and the next worker resends them with the same
uid (a receiver drops the repeat by it). Each result is then written in a fenced transaction
of its own: delivered, tried again later with backoff, or failed for good. A delivery older
than ``MAX_AGE`` expires. The lease makes one worker at a time send to one destination, in
order, over one SMTP connection per batch; a failing receiver backs off without holding up
the others. Every result is counted in ``portal_notifications_total`` by channel and outcome
once written (docs/operator.md §13).
"""

from __future__ import annotations

import logging
import random
import socket
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from app.auth.models import User
from app.database.core import Database, utcnow
from app.kit import metrics, outbound
from app.kit.config import Settings
from app.kit.crypto import SecretBox
from app.notifications import email, webhooks
from app.notifications.messages import Event, email_message
from app.notifications.models import Notification, NotificationDelivery, WebhookEndpoint
from app.notifications.outcomes import Outcome as Result
from app.notifications.outcomes import Sent
from app.reconcilers.kind import GONE, Context, Outcome, RetryLater
from app.reconcilers.leases import Lease
from app.reconcilers.notification_endpoints import endpoint_failed, endpoint_succeeded
from app.workqueue import NOTIFICATIONS

log = logging.getLogger(__name__)

BATCH = 20
# A digest's window may still grow until its end: sent a little after it.
GRACE = timedelta(seconds=5)
MAX_AGE_HOURS = 72
MAX_AGE = timedelta(hours=MAX_AGE_HOURS)
FIRST_RETRY_SECONDS = 30.0
LAST_RETRY_SECONDS = 30 * 60.0
JITTER = 0.2
# An address refused by the outbound check is tried this many times (a name may resolve
# elsewhere again), then failed.
REFUSED_TRIES = 3
NOT_CONFIGURED = "SMTP not configured"
DEFAULT_BASE_URL = "http://localhost:8000"


@dataclass(frozen=True)
class Claimed:
    id: int
    attempts: int
    event: Event


def backoff_seconds(attempts: int, jitter: float = 1.0) -> float:
    """The wait after the ``attempts``-th failed try: 30 s doubling up to 30 min, times
    ``jitter`` (0.8 to 1.2)."""
    doubled = FIRST_RETRY_SECONDS * 2.0 ** max(attempts - 1, 0)
    return min(doubled, LAST_RETRY_SECONDS) * jitter


class NotificationSender:
    name = NOTIFICATIONS

    def __init__(self, settings: Settings, database: Database, *,
                 now: Callable[[], datetime] = utcnow,
                 resolve: outbound.Resolver = socket.getaddrinfo,
                 jitter: Callable[[], float] | None = None) -> None:
        self.settings = settings
        self.database = database
        self.now = now
        self.jitter = jitter or (lambda: random.uniform(1 - JITTER, 1 + JITTER))  # noqa: S311
        self.resync_seconds = settings.worker_resync_seconds
        self.box = SecretBox.from_settings(settings)
        self.network = webhooks.Network(
            allowed=outbound.networks(settings.notify_webhook_allowed_networks.split(",")),
            http_hosts=settings.notify_http_hosts, ssl_context=_ssl(settings), resolve=resolve)
        self.base_url = settings.base_url or DEFAULT_BASE_URL

    def keys(self, db: Session) -> list[str]:
        return list(db.scalars(select(NotificationDelivery.destination).where(
            NotificationDelivery.state == "pending").distinct()))

    def reconcile(self, key: str, context: Context) -> Outcome:
        channel, _, target = key.partition(":")
        if channel == "email" and not self.settings.smtp_host:
            return self._not_configured(key, context.lease)
        endpoint = self._endpoint(int(target)) if channel == "webhook" else None
        if channel == "webhook" and endpoint is None:
            return Outcome(requeue_after=self.resync_seconds)  # disabled: kept for later
        claimed = self._claim(key, context.lease)
        if claimed:
            context.lease.check()
            if endpoint is None:
                self._send_emails(int(target), claimed, context.lease)
            else:
                self._send_webhooks(int(target), endpoint, claimed, context.lease)
        return self._next(key)

    # ----- (1) claim, committed before anything is sent

    def _claim(self, key: str, lease: Lease) -> list[Claimed]:
        now = self.now()
        with self.database.transaction() as db:
            lease.fence(db)
            expired = _expire(db, key, now)
            rows = db.execute(
                select(NotificationDelivery.id, NotificationDelivery.attempts, Notification.uid,
                       Notification.kind, Notification.payload, Notification.created_at)
                .join(Notification, Notification.id == NotificationDelivery.notification_id)
                .where(NotificationDelivery.destination == key, _due(now))
                .order_by(NotificationDelivery.next_attempt_at, NotificationDelivery.id)
                .limit(BATCH)).all()
            claimed = [Claimed(row.id, row.attempts + 1,
                               Event(row.uid, row.kind, row.payload, row.created_at))
                       for row in rows]
            for item in claimed:
                db.execute(update(NotificationDelivery)
                           .where(NotificationDelivery.id == item.id)
                           .values(sending_since=now, attempts=item.attempts)
                           .execution_options(synchronize_session=False))
        metrics.count_notifications(key.partition(":")[0], "expired", expired)
        return claimed

    # ----- (2) send

    def _send_emails(self, user_id: int, claimed: list[Claimed], lease: Lease) -> None:
        with self.database.session() as db:
            address = db.scalar(select(User.email).where(User.id == user_id))
        if address is None:
            return  # the person is gone: their deliveries went with them
        sender = self.settings.smtp_from
        messages = [email_message(item.event, base_url=self.base_url, sender=sender,
                                  recipient=address) for item in claimed]
        batch = email.send_batch(self._smtp(), messages)
        self._record("email", claimed, batch.results, lease)
        if batch.server_problem:
            raise RetryLater(batch.server_problem)

    def _send_webhooks(self, endpoint_id: int, endpoint: webhooks.Endpoint,
                       claimed: list[Claimed], lease: Lease) -> None:
        for number, item in enumerate(claimed):
            lease.check()
            sent = webhooks.deliver(endpoint, item.event, base_url=self.base_url,
                                    now=self.now(), network=self.network)
            (written,) = self._record("webhook", [item], [sent], lease)
            with self.database.transaction() as db:
                lease.fence(db)
                if sent.outcome is Result.DELIVERED:
                    endpoint_succeeded(db, endpoint_id, self.now())
                else:
                    endpoint_failed(db, endpoint_id, sent.detail, self.now())
            if sent.outcome is Result.RETRY:
                # The receiver is down or busy: the rest wait with it, untried.
                self._release(claimed[number + 1:], written["next_attempt_at"], lease)
                return

    def _endpoint(self, endpoint_id: int) -> webhooks.Endpoint | None:
        now = self.now()
        with self.database.session() as db:
            row = db.get(WebhookEndpoint, endpoint_id)
            if row is None or row.disabled:
                return None
            secrets = [self.box.open(row.secret_sealed)]
            if row.previous_secret_sealed and row.previous_until and row.previous_until > now:
                secrets.append(self.box.open(row.previous_secret_sealed))
            return webhooks.Endpoint(row.url, "slack" if row.format == "slack"
                                     else "cloudevents", tuple(secrets))

    # ----- (3) record each result

    def _record(self, channel: str, claimed: Sequence[Claimed], results: Sequence[Sent],
                lease: Lease) -> list[dict[str, Any]]:
        """Writes each result, then counts it; what was written, per delivery."""
        now = self.now()
        written = [self._after(item, sent, now) for item, sent in zip(claimed, results,
                                                                       strict=True)]
        with self.database.transaction() as db:
            lease.fence(db)
            for item, values in zip(claimed, written, strict=True):
                db.execute(update(NotificationDelivery)
                           .where(NotificationDelivery.id == item.id)
                           .values(sending_since=None, **values)
                           .execution_options(synchronize_session=False))
        for values in written:
            metrics.count_notifications(channel, values.get("state", "retry"))
        return written

    def _after(self, item: Claimed, sent: Sent, now: datetime) -> dict[str, Any]:
        if sent.outcome is Result.DELIVERED:
            return {"state": "delivered", "delivered_at": now, "last_error": sent.detail}
        permanent = sent.outcome is Result.PERMANENT and (
            not sent.refused_address or item.attempts >= REFUSED_TRIES)
        if permanent:
            log.info("notification %s failed for good: %s", item.event.uid, sent.detail)
            return {"state": "failed", "last_error": sent.detail}
        wait = backoff_seconds(item.attempts, self.jitter())
        return {"next_attempt_at": now + timedelta(seconds=wait), "last_error": sent.detail}

    def _release(self, untried: Sequence[Claimed], later: datetime, lease: Lease) -> None:
        """Claimed but not sent: pending as before, this attempt not counted, tried after the
        one that failed (in their order)."""
        if not untried:
            return
        with self.database.transaction() as db:
            lease.fence(db)
            for item in untried:
                db.execute(update(NotificationDelivery)
                           .where(NotificationDelivery.id == item.id)
                           .values(sending_since=None, attempts=item.attempts - 1,
                                   next_attempt_at=later)
                           .execution_options(synchronize_session=False))

    def _not_configured(self, key: str, lease: Lease) -> Outcome:
        with self.database.transaction() as db:
            lease.fence(db)
            db.execute(update(NotificationDelivery).where(
                NotificationDelivery.destination == key,
                NotificationDelivery.state == "pending").values(last_error=NOT_CONFIGURED)
                .execution_options(synchronize_session=False))
        return Outcome(requeue_after=self.resync_seconds)

    def _next(self, key: str) -> Outcome:
        """Looked at again when the earliest pending delivery is due; forgotten when none is
        left (an emission enqueues the destination again)."""
        with self.database.session() as db:
            rows = db.execute(
                select(NotificationDelivery.next_attempt_at, Notification.deliver_after)
                .join(Notification, Notification.id == NotificationDelivery.notification_id)
                .where(NotificationDelivery.destination == key,
                       NotificationDelivery.state == "pending")).all()
        if not rows:
            return GONE
        earliest = min(max(at, (after + GRACE) if after else at) for at, after in rows)
        return Outcome(requeue_after=max((earliest - self.now()).total_seconds(), 0.0))

    def _smtp(self) -> email.SmtpSettings:
        s = self.settings
        return email.SmtpSettings(
            host=s.smtp_host or "", sender=s.smtp_from, port=s.smtp_port,
            security=s.smtp_security, username=s.smtp_username, password=s.smtp_password,
            ca_file=s.smtp_ca_file, timeout_seconds=s.smtp_timeout_seconds)


def _due(now: datetime):  # type: ignore[no-untyped-def]
    return and_(NotificationDelivery.state == "pending",
                NotificationDelivery.next_attempt_at <= now,
                or_(Notification.deliver_after.is_(None),
                    Notification.deliver_after <= now - GRACE))


def _expire(db: Session, key: str, now: datetime) -> int:
    """Expires the destination's deliveries past ``MAX_AGE``; how many."""
    old = select(Notification.id).where(Notification.created_at < now - MAX_AGE)
    result = db.execute(update(NotificationDelivery).where(
        NotificationDelivery.destination == key, NotificationDelivery.state == "pending",
        NotificationDelivery.notification_id.in_(old))
        .values(state="expired", sending_since=None,
                last_error=f"not delivered within {MAX_AGE_HOURS} hours")
        .execution_options(synchronize_session=False))
    return int(getattr(result, "rowcount", 0) or 0)


def _ssl(settings: Settings) -> ssl.SSLContext | None:
    if not settings.notify_webhook_ca_file:
        return None
    return ssl.create_default_context(cafile=settings.notify_webhook_ca_file)
