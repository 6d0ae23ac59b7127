"""A worker killed (SIGKILL) while a receiver holds its request loses nothing: a second worker
delivers every notification, and the only repeats are of those in flight at the kill, which a
receiver drops by their uid."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from app.database.core import Database
from app.kit.config import Settings
from app.kit.crypto import SecretBox
from app.notifications import emit, signing
from app.notifications.models import Notification, NotificationDelivery, WebhookEndpoint
from tests import factories
from tests.support import smtp
from tests.support.cluster_worker import WorkerProcess
from tests.support.notification_worker import notification_worker_env
from tests.support.smtp import Mailbox, smtp_server
from tests.support.waiting import wait_for
from tests.support.webhook_receiver import Receiver, webhook_receiver

SECRET = signing.new_secret()
COUNT = 12
LEASE_SECONDS = 3.0


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[Mailbox, Receiver]]:
    with smtp_server(tmp_path) as mailbox, webhook_receiver(tmp_path, [SECRET]) as receiver:
        yield mailbox, receiver


def _outbox(database: Database, url: str) -> list[str]:
    """COUNT notifications, each to a person's email and to one endpoint; their uids."""
    with database.transaction() as db:
        person = factories.user(db, "ada@example.com").id
        hook = WebhookEndpoint(tenant_id=None, name="ops", url=url, format="slack",
                               secret_sealed=SecretBox.from_settings(Settings(env="test"))
                               .seal(SECRET))
        db.add(hook)
        db.flush()
        for number in range(COUNT):
            emit.notify(db, emit.Notice(
                kind="host.unreachable", tenant_id=None, subject_type="host_cluster",
                subject_id=str(number), payload={"host": f"host-{number}", "path": "/admin"}),
                [person], [hook.id])
        return list(db.scalars(select(Notification.uid).order_by(Notification.id)))


def _in_flight(database: Database) -> set[str]:
    """The uids of webhook deliveries claimed and not yet recorded."""
    with database.session() as db:
        return set(db.scalars(
            select(Notification.uid)
            .join(NotificationDelivery, NotificationDelivery.notification_id == Notification.id)
            .where(NotificationDelivery.channel == "webhook",
                   NotificationDelivery.state == "pending",
                   NotificationDelivery.sending_since.is_not(None))))


def _states(database: Database) -> Counter[str]:
    with database.session() as db:
        return Counter(db.scalars(select(NotificationDelivery.state)))


def test_a_worker_killed_mid_delivery_loses_nothing_and_repeats_only_what_was_in_flight(
        own_pg_database: Database, tmp_path: Path,
        servers: tuple[Mailbox, Receiver]) -> None:
    mailbox, receiver = servers
    uids = _outbox(own_pg_database, receiver.url)
    ca_file = tmp_path / "receiver-ca.pem"
    ca_file.write_text(receiver.ca_pem)
    env = notification_worker_env(
        database_url=own_pg_database.url, lease_seconds=LEASE_SECONDS,
        PORTAL_SMTP_HOST=smtp.HOST, PORTAL_SMTP_PORT=str(mailbox.port),
        PORTAL_SMTP_USERNAME=smtp.USERNAME, PORTAL_SMTP_PASSWORD=smtp.PASSWORD,
        PORTAL_SMTP_FROM=smtp.SENDER, PORTAL_SMTP_CA_FILE=str(mailbox.ca_file),
        PORTAL_NOTIFY_WEBHOOK_ALLOWED_NETWORKS="127.0.0.1/32",
        PORTAL_NOTIFY_WEBHOOK_CA_FILE=str(ca_file))
    log = tmp_path / "workers.log"

    receiver.hold()
    first = WorkerProcess.start(env, log, "tests.support.notification_worker")
    try:
        # Every email sent and recorded; a webhook claimed and committed, its request sent
        # and held by the receiver: kill it there.
        wait_for(lambda: _states(own_pg_database)["delivered"] == COUNT,
                 lambda: f"the emails delivered, found {_states(own_pg_database)}")
        wait_for(lambda: receiver.waiting, "the receiver holding a request")
        in_flight = _in_flight(own_pg_database)
        assert in_flight
    finally:
        first.kill()
    receiver.release()

    second = WorkerProcess.start(env, log, "tests.support.notification_worker")
    try:
        wait_for(lambda: _states(own_pg_database) == Counter(delivered=2 * COUNT),
                 lambda: f"every delivery delivered, found {_states(own_pg_database)}",
                 timeout=60)
    finally:
        second.stop()

    webhooks = Counter(r.id for r in receiver.accepted())
    assert set(webhooks) == set(uids)
    assert {uid for uid, times in webhooks.items() if times > 1} <= in_flight
    emails = Counter(m["X-Portal-Notification-Id"] for m in mailbox.to("ada@example.com"))
    assert set(emails) == set(uids)
    # Recorded as delivered before the kill: never sent again.
    assert max(emails.values()) == 1
