"""The outbox's counters as an operator charts them: ``portal_notifications_total`` per channel
and outcome after deliveries to a real SMTP server (delivered, tried again, failed for good),
deliveries expired and dropped (counted once the change that dropped them commits), and the
worker's gauge of deliveries pending per channel."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, generate_latest

from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kit.metrics import registry_of
from app.notifications import emit
from app.process.business_metrics import BusinessGauges
from app.reconcilers.notifications import MAX_AGE, NotificationSender
from app.reconcilers.runtime import Runtime
from app.workqueue import NOTIFICATIONS
from tests import factories
from tests.http.test_metrics import sample
from tests.support import smtp
from tests.support.smtp import Mailbox, smtp_server

BUSY = "450 4.2.1 Mailbox busy, try again later"
UNKNOWN = "550 5.1.1 No such user"


@pytest.fixture
def mailbox(tmp_path: Path) -> Iterator[Mailbox]:
    with smtp_server(tmp_path) as serving:
        yield serving


def counted(channel: str, outcome: str) -> float:
    value = REGISTRY.get_sample_value("portal_notifications_total",
                                      {"channel": channel, "outcome": outcome})
    assert value is not None, "every series is served from 0"
    return value


def counts() -> dict[tuple[str, str], float]:
    return {(channel, outcome): counted(channel, outcome)
            for channel in ("email", "webhook")
            for outcome in ("delivered", "retry", "failed", "dropped", "expired")}


def increase(before: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    """The series that grew since ``before``, and by how much."""
    return {key: value - before[key] for key, value in counts().items() if value != before[key]}


def notice(subject_id: str = "7") -> emit.Notice:
    return emit.Notice(kind="quota.requested", tenant_id=None, subject_type="quota_request",
                       subject_id=subject_id, payload={
                           "tenant": "acme", "request": "H100 80GB quota request #7 (acme)",
                           "request_id": 7, "gpus": 4, "gpu_class": "H100 80GB", "region": "",
                           "ends_at": None, "path": "/admin/quota-requests"})


def people(database: Database, *addresses: str) -> list[int]:
    with database.transaction() as db:
        return [factories.user(db, address).id for address in addresses]


def told(database: Database, to: list[int], subject_id: str = "7") -> None:
    with database.transaction() as db:
        emit.notify(db, notice(subject_id), to, [])


def fails_after_its_fan_out(database: Database, user_id: int) -> None:
    with database.transaction() as db:
        emit.notify(db, notice("2"), [user_id], [])
        raise RuntimeError("the change fails after its fan-out")


def worker(database: Database, mailbox: Mailbox,
           clock: Callable[[], datetime] = utcnow) -> Runtime:
    settings = Settings(env="test", smtp_host=smtp.HOST, smtp_port=mailbox.port,
                        smtp_username=smtp.USERNAME, smtp_password=smtp.PASSWORD,
                        smtp_from=smtp.SENDER, smtp_ca_file=str(mailbox.ca_file))
    return Runtime(database, [NotificationSender(settings, database, now=clock)], clock=clock,
                   identity="counters")


def pending(database: Database) -> dict[str, float | None]:
    text = generate_latest(registry_of(BusinessGauges(database, [NOTIFICATIONS]))).decode()
    return {channel: sample(text, "portal_notification_deliveries_pending", channel=channel)
            for channel in ("email", "webhook")}


def test_each_delivery_is_counted_by_its_outcome_and_the_rest_stay_pending(
        database: Database, mailbox: Mailbox) -> None:
    ada, bob, cy = people(database, "ada@example.com", "bob@example.com", "cy@example.com")
    mailbox.refuse.update({"bob@example.com": BUSY, "cy@example.com": UNKNOWN})
    told(database, [ada, bob, cy])
    assert pending(database) == {"email": 3, "webhook": 0}
    before = counts()

    worker(database, mailbox).run_pass([NOTIFICATIONS])

    assert len(mailbox.to("ada@example.com")) == 1
    assert increase(before) == {("email", "delivered"): 1, ("email", "retry"): 1,
                                ("email", "failed"): 1}
    assert pending(database) == {"email": 1, "webhook": 0}  # bob's, tried again later


def test_deliveries_past_their_age_are_counted_expired(
        database: Database, mailbox: Mailbox) -> None:
    ada, bob = people(database, "ada@example.com", "bob@example.com")
    told(database, [ada, bob])
    before = counts()

    later = utcnow() + MAX_AGE + timedelta(minutes=1)
    worker(database, mailbox, clock=lambda: later).run_pass([NOTIFICATIONS])

    assert mailbox.messages == []
    assert increase(before) == {("email", "expired"): 2}
    assert pending(database) == {"email": 0, "webhook": 0}


def test_a_delivery_dropped_at_fan_out_is_counted_once_its_change_commits(
        sqlite_database: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emit, "QUEUE_LIMIT", 1)
    (ada,) = people(sqlite_database, "ada@example.com")
    told(sqlite_database, [ada], "1")
    before = counts()

    with pytest.raises(RuntimeError):
        fails_after_its_fan_out(sqlite_database, ada)
    assert increase(before) == {}
    told(sqlite_database, [ada], "3")
    assert increase(before) == {("email", "dropped"): 1}
    assert pending(sqlite_database) == {"email": 1, "webhook": 0}
