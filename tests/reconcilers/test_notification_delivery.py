"""The outbox delivered by the worker's ``notifications`` kind, to a real SMTP server (STARTTLS,
a login) and a real HTTPS receiver checking signatures: delivered once per uid, tried again
with backoff, failed for good when the receiver says so, kept while the mail server is down,
and never sent to an address the portal does not call."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.audit.models import AuditEvent
from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kit.crypto import SecretBox
from app.notifications import emit, signing
from app.notifications.models import Notification, NotificationDelivery, WebhookEndpoint
from app.reconcilers.notification_endpoints import endpoint_failed, endpoint_succeeded
from app.reconcilers.notifications import NOT_CONFIGURED, NotificationSender, backoff_seconds
from app.reconcilers.runtime import Runtime
from app.workqueue import NOTIFICATIONS
from tests import factories
from tests.support import smtp
from tests.support.smtp import Mailbox, smtp_server
from tests.support.web import free_port
from tests.support.webhook_receiver import Receiver, webhook_receiver

SECRET = signing.new_secret()


class Clock:
    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class Outbox:
    database: Database
    clock: Clock
    settings: Settings
    runtime: Runtime
    started: bool = False

    def run(self, after_seconds: float = 0.0) -> int:
        """Moves the clock on, then runs the notification items due. The first run starts
        the clock at the real time: what the emissions wrote before it is due."""
        if not self.started:
            self.clock.now, self.started = max(self.clock.now, utcnow()), True
        self.clock.advance(after_seconds)
        return self.runtime.run_pass([NOTIFICATIONS])

    def deliveries(self) -> list[NotificationDelivery]:
        with self.database.session() as db:
            return list(db.scalars(select(NotificationDelivery)
                                   .order_by(NotificationDelivery.id)))


def outbox(database: Database, tmp_path: Path, **settings: Any) -> Outbox:
    clock = Clock()
    configured = Settings(env="test", **settings)
    sender = NotificationSender(configured, database, now=clock, resolve=settings_resolver)
    return Outbox(database, clock, configured,
                  Runtime(database, [sender], clock=clock, identity="notify-1"))


def settings_resolver(host: str, port: Any, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
    """The test's DNS: hooks.example.com is a private address, everything else loopback."""
    address = "10.0.0.1" if host == "hooks.example.com" else "127.0.0.1"
    return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port or 443)))]


def smtp_settings(port: int, ca_file: Path) -> dict[str, Any]:
    return {"smtp_host": smtp.HOST, "smtp_port": port, "smtp_username": smtp.USERNAME,
            "smtp_password": smtp.PASSWORD, "smtp_from": smtp.SENDER,
            "smtp_ca_file": str(ca_file)}


def webhook_settings(receiver: Receiver, tmp_path: Path) -> dict[str, Any]:
    ca_file = tmp_path / "receiver-ca.pem"
    ca_file.write_text(receiver.ca_pem)
    return {"notify_webhook_allowed_networks": "127.0.0.1/32",
            "notify_webhook_ca_file": str(ca_file)}


def emitted(database: Database, people: list[int], endpoints: list[int] | None = None) -> str:
    """A quota request told to ``people`` (and the endpoints) the way the service tells it;
    its uid."""
    notice = emit.Notice(kind="quota.requested", tenant_id=None, subject_type="quota_request",
                         subject_id="7", payload={
                             "tenant": "acme", "request": "H100 80GB quota request #7 (acme)",
                             "request_id": 7, "gpus": 4, "gpu_class": "H100 80GB",
                             "region": "", "ends_at": None, "path": "/admin/quota-requests"})
    with database.transaction() as db:
        notification_id = emit.notify(db, notice, people, endpoints or [])
        return db.scalars(select(Notification.uid)
                          .where(Notification.id == notification_id)).one()


def person(database: Database, address: str) -> int:
    with database.transaction() as db:
        return factories.user(db, address).id


def endpoint(database: Database, url: str) -> int:
    with database.transaction() as db:
        row = WebhookEndpoint(tenant_id=None, name="ops", url=url, format="cloudevents",
                              secret_sealed=SecretBox.from_settings(Settings(env="test"))
                              .seal(SECRET))
        db.add(row)
        db.flush()
        return row.id


@pytest.fixture(params=["postgresql", "sqlite"])
def store(request: pytest.FixtureRequest) -> Database:
    """PostgreSQL (the test's rolled-back transaction) or the embedded SQLite file."""
    name = "database" if request.param == "postgresql" else "sqlite_database"
    found: Database = request.getfixturevalue(name)
    return found


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    with webhook_receiver(tmp_path, [SECRET]) as serving:
        yield serving


@pytest.fixture
def mailbox(tmp_path: Path) -> Iterator[Mailbox]:
    with smtp_server(tmp_path) as serving:
        yield serving


def test_an_emitted_notification_reaches_the_mailbox_and_the_receiver_signed_with_its_uid(
        store: Database, tmp_path: Path, mailbox: Mailbox, receiver: Receiver) -> None:
    box = outbox(store, tmp_path, **smtp_settings(mailbox.port, mailbox.ca_file),
                 **webhook_settings(receiver, tmp_path), base_url="https://portal.test")
    ada = person(store, "ada@example.com")
    hook = endpoint(store, receiver.url)
    uid = emitted(store, [ada], [hook])

    assert box.run() == 2
    (message,) = mailbox.to("ada@example.com")
    assert message["X-Portal-Notification-Id"] == uid
    assert message["Message-ID"] == f"<{uid}@portal.test>"
    plain = message.get_body(("plain",))
    assert plain is not None
    assert "https://portal.test/admin/quota-requests" in plain.get_content()
    assert mailbox.logins == [smtp.USERNAME]
    (call,) = receiver.received
    assert call.refused is None and call.status == 200 and call.id == uid
    assert [(d.state, d.attempts, d.sending_since) for d in box.deliveries()] == [
        ("delivered", 1, None), ("delivered", 1, None)]
    # Delivered is delivered: the next passes send nothing again.
    box.run(after_seconds=3600)
    assert len(mailbox.messages) == 1 and len(receiver.received) == 1


def test_a_receiver_failing_twice_gets_it_on_the_third_try_after_the_backoff(
        store: Database, tmp_path: Path, receiver: Receiver) -> None:
    box = outbox(store, tmp_path, **webhook_settings(receiver, tmp_path))
    hook = endpoint(store, receiver.url)
    uid = emitted(store, [], [hook])
    receiver.fail_next(1, 503)
    receiver.fail_next(1, 429)

    box.run()
    (first,) = box.deliveries()
    waited = (first.next_attempt_at - box.clock()).total_seconds()
    assert first.state == "pending" and first.attempts == 1
    assert 0.8 * 30 <= waited <= 1.2 * 30 and "HTTP 503" in first.last_error
    box.run(after_seconds=0.75 * 30)  # not yet due: nothing is sent
    assert len(receiver.received) == 1
    box.run(after_seconds=0.5 * 30)
    (second,) = box.deliveries()
    assert second.attempts == 2 and "HTTP 429" in second.last_error
    assert 0.8 * 60 <= (second.next_attempt_at - box.clock()).total_seconds() <= 1.2 * 60
    box.run(after_seconds=1.25 * 60)

    (done,) = box.deliveries()
    assert (done.state, done.attempts) == ("delivered", 3)
    assert [r.id for r in receiver.received] == [uid, uid, uid]
    assert len(receiver.accepted()) == 1
    with store.session() as db:
        row = db.get(WebhookEndpoint, hook)
        assert row is not None and row.state == "ok" and row.consecutive_failures == 0


def test_while_a_receiver_is_down_the_rest_of_its_queue_waits_untried(
        database: Database, tmp_path: Path, receiver: Receiver) -> None:
    box = outbox(database, tmp_path, **webhook_settings(receiver, tmp_path))
    hook = endpoint(database, receiver.url)
    first, second = emitted(database, [], [hook]), emitted(database, [], [hook])
    receiver.fail_next(1, 502)

    box.run()
    assert [(d.state, d.attempts) for d in box.deliveries()] == [("pending", 1),
                                                                  ("pending", 0)]
    box.run(after_seconds=backoff_seconds(1, 1.2) + 1)
    assert [(d.state, d.attempts) for d in box.deliveries()] == [("delivered", 2),
                                                                  ("delivered", 1)]
    assert [r.id for r in receiver.received] == [first, first, second]


def test_a_4xx_fails_the_delivery_for_good(
        database: Database, tmp_path: Path, receiver: Receiver) -> None:
    box = outbox(database, tmp_path, **webhook_settings(receiver, tmp_path))
    emitted(database, [], [endpoint(database, receiver.url)])
    receiver.fail_next(1, 404)

    box.run()
    box.run(after_seconds=3600)
    (delivery,) = box.deliveries()
    assert (delivery.state, delivery.attempts) == ("failed", 1)
    assert "HTTP 404" in delivery.last_error
    assert len(receiver.received) == 1


def test_mail_waits_while_the_smtp_server_is_down_and_goes_once_it_is_up(
        store: Database, tmp_path: Path) -> None:
    port = free_port(smtp.HOST)
    ca_file = tmp_path / "smtp-server" / "cert.pem"
    box = outbox(store, tmp_path, **smtp_settings(port, ca_file))
    uid = emitted(store, [person(store, "ada@example.com")])

    box.run()
    (waiting,) = box.deliveries()
    assert waiting.state == "pending" and "could not reach the SMTP server" in waiting.last_error

    with smtp_server(tmp_path, port=port) as mailbox:
        box.run(after_seconds=10 * 60)
        (message,) = mailbox.to("ada@example.com")
    assert message["X-Portal-Notification-Id"] == uid
    (delivered,) = box.deliveries()
    assert (delivered.state, delivered.attempts) == ("delivered", 2)


def test_without_smtp_settings_mail_stays_pending_and_says_why(
        database: Database, tmp_path: Path) -> None:
    box = outbox(database, tmp_path)
    emitted(database, [person(database, "ada@example.com")])

    box.run()
    (waiting,) = box.deliveries()
    assert (waiting.state, waiting.attempts, waiting.last_error) == (
        "pending", 0, NOT_CONFIGURED)


def test_an_endpoint_resolving_to_a_private_address_is_never_called_and_fails_after_three_tries(
        database: Database, tmp_path: Path, receiver: Receiver) -> None:
    box = outbox(database, tmp_path, **webhook_settings(receiver, tmp_path))
    emitted(database, [], [endpoint(database, f"https://hooks.example.com:{receiver.port}/x")])

    box.run()
    box.run(after_seconds=backoff_seconds(1, 1.2) + 1)
    (retried,) = box.deliveries()
    assert (retried.state, retried.attempts) == ("pending", 2)
    box.run(after_seconds=backoff_seconds(2, 1.2) + 1)

    (refused,) = box.deliveries()
    assert (refused.state, refused.attempts) == ("failed", 3)
    assert "10.0.0.1" in refused.last_error
    assert receiver.received == []


def test_deliveries_older_than_three_days_expire(
        database: Database, tmp_path: Path, receiver: Receiver) -> None:
    box = outbox(database, tmp_path, **webhook_settings(receiver, tmp_path))
    emitted(database, [], [endpoint(database, receiver.url)])
    receiver.status = 503

    box.run()
    box.run(after_seconds=73 * 3600)
    (old,) = box.deliveries()
    assert old.state == "expired" and old.attempts == 1
    assert len(receiver.received) == 1


def test_an_endpoint_failing_five_times_over_a_quarter_hour_is_failing_until_one_success(
        database: Database) -> None:
    hook = endpoint(database, "https://hooks.example.com/x")
    start = utcnow()
    with database.transaction() as db:
        for minute in (0, 1, 2, 3):
            endpoint_failed(db, hook, "HTTP 503", start + timedelta(minutes=minute))
        endpoint_failed(db, hook, "HTTP 503", start + timedelta(minutes=10))
        row = db.get(WebhookEndpoint, hook)
        assert row is not None and row.state == "ok"  # five, but not yet for 15 minutes
        endpoint_failed(db, hook, "HTTP 502", start + timedelta(minutes=15))
        db.refresh(row)
        assert (row.state, row.consecutive_failures, row.last_error) == (
            "failing", 6, "HTTP 502")
        endpoint_succeeded(db, hook, start + timedelta(minutes=16))
        db.refresh(row)
        assert (row.state, row.consecutive_failures, row.failing_since) == ("ok", 0, None)
        actions = list(db.scalars(select(AuditEvent.action).where(
            AuditEvent.target_type == "webhook_endpoint").order_by(AuditEvent.id)))
    assert actions == ["webhook_endpoint.failing", "webhook_endpoint.recovered"]


def test_the_kind_lists_every_destination_with_pending_deliveries(
        database: Database, tmp_path: Path) -> None:
    box = outbox(database, tmp_path)
    ada = person(database, "ada@example.com")
    emitted(database, [ada])
    sender = box.runtime.kinds[NOTIFICATIONS]
    with database.session() as db:
        assert list(sender.keys(db)) == [f"email:{ada}"]
    box.run()  # SMTP not configured: still pending, still listed
    with database.session() as db:
        assert list(sender.keys(db)) == [f"email:{ada}"]
