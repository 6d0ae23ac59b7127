"""The worker's ``notification-scan`` kind on a fixed clock: quotas and kubeconfigs ending soon,
clusters stuck provisioning and idle GPUs each become one notification, to exactly the people
who should hear of it, once however often the scan looks; and a kubeconfig's holder reads the
warning from a real SMTP server."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import select, true
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from app.database.core import Database, utcnow
from app.gpu_classes.models import GpuClass
from app.kit.config import Settings
from app.kubeconfigs.models import KubeconfigGrant
from app.notifications import scan
from app.notifications.messages import Event, email_message
from app.notifications.models import Notification, NotificationDelivery
from app.process.worker import build_kinds
from app.reconcilers.notification_scan import NotificationScanner
from app.reconcilers.notifications import NotificationSender
from app.reconcilers.runtime import Runtime
from app.tenants.models import Tenant
from app.workqueue import NOTIFICATION_SCAN, NOTIFICATIONS
from app.workqueue.models import WorkItem
from tests import factories
from tests.support import smtp
from tests.support.drive import run_due
from tests.support.fake_prometheus import Answers, fake_prometheus, refusing_url
from tests.support.kube import InMemoryConnector
from tests.support.smtp import smtp_server
from tests.support.tenancy import build_tenancy
from tests.utilisation import support as fleet

Row = TypeVar("Row")
MONDAY_NOON = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
RESYNC = timedelta(seconds=Settings(env="test").worker_poll_seconds * 150 + 1)


class Clock:
    def __init__(self, now: datetime = MONDAY_NOON) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@dataclass(frozen=True)
class People:
    """acme's admin, member and viewer, a second acme admin, globex's admin, the platform's."""

    acme_admin: int
    acme_admin_2: int
    acme_member: int
    acme_viewer: int
    globex_admin: int
    platform_admin: int
    acme: int
    globex: int
    h100: int


@pytest.fixture(params=["postgresql", "sqlite"])
def store(request: pytest.FixtureRequest) -> Database:
    """PostgreSQL (the test's rolled-back transaction) or the embedded SQLite file."""
    found: Database = request.getfixturevalue(
        "database" if request.param == "postgresql" else "sqlite_database")
    return found


@pytest.fixture
def people(store: Database) -> People:
    with store.transaction() as db:
        t = build_tenancy(db, nodes=0)
        second = factories.user(db, "acme-admin-2@example.com")
        factories.membership(db, t.acme, second, "admin")
        return People(t.acme_admin.id, second.id, t.acme_member.id, t.acme_viewer.id,
                      t.globex_admin.id, t.platform_admin.id, t.acme.id, t.globex.id, t.h100.id)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _get(db: Session, model: type[Row], row_id: int) -> Row:
    row = db.get(model, row_id)
    assert row is not None
    return row


def scanner(store: Database, clock: Clock, **settings: Any) -> NotificationScanner:
    return NotificationScanner(Settings(env="test", **settings), store, clock=clock)


def told(store: Database) -> list[tuple[str, str | None, list[int]]]:
    """(kind, dedupe key, the users emailed) of every notification, in order."""
    with store.session() as db:
        rows = db.scalars(select(Notification).order_by(Notification.id)).all()
        return [(row.kind, row.dedupe_key, sorted(db.scalars(
            select(NotificationDelivery.user_id).where(
                NotificationDelivery.notification_id == row.id,
                NotificationDelivery.channel == "email"))))
            for row in rows]


def subject(store: Database, kind: str, key: str | None = None) -> tuple[str, str]:
    """The subject and plain body of the kind's one notification (of dedupe ``key``), as
    emailed."""
    with store.session() as db:
        query = select(Notification).where(Notification.kind == kind)
        if key is not None:
            query = query.where(Notification.dedupe_key == key)
        row = db.scalars(query).one()
        message = email_message(Event(row.uid, row.kind, row.payload, row.created_at),
                                base_url="https://portal.test", sender=smtp.SENDER,
                                recipient="someone@example.com")
    plain = message.get_body(("plain",))
    assert plain is not None
    return str(message["Subject"]), str(plain.get_content())


def scan_twice(store: Database, clock: Clock, kind: NotificationScanner) -> None:
    """A scan, then another at the next resync: the second must tell nothing new."""
    assert run_due(kind, "w") == 1
    first = told(store)
    clock.now += RESYNC
    assert run_due(kind, "w") == 1
    assert told(store) == first


# ----- quotas ending


def approved(store: Database, p: People, ends_in: timedelta, gpus: int = 8) -> int:
    with store.transaction() as db:
        row = factories.quota_request(db, _get(db, Tenant, p.acme), _get(db, GpuClass, p.h100),
                                      gpus=10, state="approved")
        row.approved_gpus, row.ends_at = gpus, MONDAY_NOON + ends_in
        return row.id


def test_a_quota_ending_within_three_days_tells_the_tenants_admins_once(
        store: Database, people: People, clock: Clock) -> None:
    soon = approved(store, people, timedelta(days=2, hours=2))
    approved(store, people, timedelta(days=5))  # not yet

    scan_twice(store, clock, scanner(store, clock))

    assert told(store) == [("quota.expiring", f"quota.expiring:{soon}",
                            sorted([people.acme_admin, people.acme_admin_2]))]
    title, body = subject(store, "quota.expiring")
    assert title == "Quota of 8 GPUs (H100 80GB) for acme ends on 9 Dec 2026"
    assert "ends on 9 Dec 2026 at 14:00 UTC" in body
    assert "https://portal.test/t/acme" in body


def test_two_workers_scanning_at_once_tell_it_once(
        store: Database, people: People, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both read the request as untold (the race the queries' filter cannot close): the
    outbox's unique dedupe key lets only the first write it, with its deliveries."""
    approved(store, people, timedelta(days=1))
    monkeypatch.setattr(scan, "_untold", lambda *_: true())
    written = []
    for _ in ("worker-1", "worker-2"):
        with store.transaction() as db:
            written.append(scan.expiring_quotas(db, MONDAY_NOON, 100))
    assert written == [1, 0]
    assert [(kind, users) for kind, _, users in told(store)] == [
        ("quota.expiring", sorted([people.acme_admin, people.acme_admin_2]))]
    with store.session() as db:
        assert len(db.scalars(select(NotificationDelivery.id)).all()) == 2


# ----- clusters stuck provisioning


def cluster(store: Database, p: People, name: str, age: timedelta, **fields: Any) -> int:
    with store.transaction() as db:
        return factories.cluster(db, _get(db, Tenant, p.acme), factories.host_cluster(db), name,
                                 created_at=MONDAY_NOON - age, created_by_id=p.acme_member,
                                 **fields).id


def condition(type_: str, status: bool, at: datetime = MONDAY_NOON - timedelta(hours=3)
              ) -> dict[str, Any]:
    return {"type": type_, "status": "True" if status else "False", "reason": "R",
            "message": "", "lastTransitionTime": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "observedGeneration": 1}


def test_a_cluster_provisioning_too_long_tells_its_creator_and_admins_once_per_generation(
        store: Database, people: People, clock: Clock) -> None:
    waiting = [condition("NamespaceReady", True), condition("QuotaApplied", False),
               condition("Ready", False)]
    stuck = cluster(store, people, "train", timedelta(minutes=45), conditions=waiting)
    cluster(store, people, "young", timedelta(minutes=10), conditions=waiting)
    cluster(store, people, "ready", timedelta(hours=5), conditions=[condition("Ready", True)])
    cluster(store, people, "failed", timedelta(hours=5),
            conditions=[condition("Ready", False), condition("Failed", True)])
    cluster(store, people, "sleeping", timedelta(hours=5), conditions=waiting, power="asleep")
    cluster(store, people, "going", timedelta(hours=5), conditions=waiting,
            deletion_requested_at=MONDAY_NOON)

    scan_twice(store, clock, kind := scanner(store, clock))

    admins_and_creator = sorted([people.acme_admin, people.acme_admin_2, people.acme_member])
    assert told(store) == [("cluster.stuck", f"cluster.stuck:{stuck}:1", admins_and_creator)]
    title, body = subject(store, "cluster.stuck")
    assert title == "Cluster train of acme stuck provisioning since 7 Dec 2026 at 11:15 UTC"
    assert "45 minutes now: longer than the 30 minutes" in body
    assert "waits on step QuotaApplied" in body
    assert "https://portal.test/t/acme/clusters/train" in body

    # A change of its spec is a new start, told again if it sticks too.
    with store.transaction() as db:
        row = db.get(VirtualCluster, stuck)
        assert row is not None
        row.generation = 2
    clock.now += RESYNC
    run_due(kind, "w")
    assert [key for _, key, _ in told(store)] == [f"cluster.stuck:{stuck}:1",
                                                   f"cluster.stuck:{stuck}:2"]


HOUR_AGO = MONDAY_NOON - timedelta(hours=1)


@pytest.mark.parametrize(("conditions", "since", "step"), [
    ([], MONDAY_NOON - timedelta(hours=5), "NamespaceReady"),
    # Left Ready an hour ago (its spec changed): provisioning since then.
    ([condition("NamespaceReady", True), condition("Ready", False, HOUR_AGO)], HOUR_AGO,
     "QuotaApplied"),
    # Retried an hour ago after failing.
    ([condition("Ready", False), condition("Failed", False, HOUR_AGO)], HOUR_AGO,
     "NamespaceReady"),
    ([condition("HostReachable", False)], None, None),
    ([condition("Asleep", True)], None, None),
    ([condition("Ready", True)], None, None),
    ([condition("Failed", True)], None, None),
])
def test_since_when_and_on_what_a_cluster_waits(
        conditions: list[dict[str, Any]], since: datetime | None, step: str | None) -> None:
    found = scan.provisioning(conditions, MONDAY_NOON - timedelta(hours=5), None)
    shown = (found.since, found.step) if found else (None, None)
    assert shown == (since, step)


def test_the_stuck_minutes_are_the_operators(store: Database, people: People,
                                             clock: Clock) -> None:
    cluster(store, people, "train", timedelta(minutes=45), conditions=[])
    run_due(scanner(store, clock, notify_stuck_minutes=60), "w")
    assert told(store) == []


# ----- kubeconfigs ending


def grant(store: Database, p: People, user_id: int, cluster_id: int, expires_in: timedelta, *,
          taken_ago: timedelta = timedelta(days=2), **fields: Any) -> int:
    with store.transaction() as db:
        row = KubeconfigGrant(user_id=user_id, cluster_id=cluster_id, role="edit",
                              service_account=f"user-{user_id}-edit",
                              secret_name=f"user-{user_id}-edit-{expires_in.total_seconds():g}",
                              created_at=MONDAY_NOON - taken_ago,
                              expires_at=MONDAY_NOON + expires_in, **fields)
        db.add(row)
        db.flush()
        return row.id


def test_a_kubeconfig_ending_within_a_day_tells_its_holder_only_once(
        store: Database, people: People, clock: Clock) -> None:
    train = cluster(store, people, "train", timedelta(days=3),
                    conditions=[condition("Ready", True)])
    ending = grant(store, people, people.acme_viewer, train, timedelta(hours=12))
    grant(store, people, people.acme_member, train, timedelta(hours=20))  # not yet
    grant(store, people, people.acme_admin, train, timedelta(hours=10),
          revoked_at=MONDAY_NOON - timedelta(hours=1))
    # The default day-long kubeconfig: told with a quarter of its life left, 6 hours.
    day_long = grant(store, people, people.acme_member, train, timedelta(hours=5),
                     taken_ago=timedelta(hours=19))
    grant(store, people, people.acme_admin, train, timedelta(hours=7),
          taken_ago=timedelta(hours=17))  # more than a quarter left
    # Taken for three hours: a script's or a session's, never told.
    grant(store, people, people.acme_member, train, timedelta(minutes=30),
          taken_ago=timedelta(hours=2, minutes=30))

    scan_twice(store, clock, scanner(store, clock))

    assert sorted(told(store)) == sorted([
        ("kubeconfig.expiring", f"kubeconfig.expiring:{ending}", [people.acme_viewer]),
        ("kubeconfig.expiring", f"kubeconfig.expiring:{day_long}", [people.acme_member])])
    title, body = subject(store, "kubeconfig.expiring", f"kubeconfig.expiring:{ending}")
    assert title == "Your kubeconfig for train expires on 8 Dec 2026 at 00:00 UTC"
    assert "The edit kubeconfig you took for cluster train of tenant acme" in body


def test_a_kubeconfig_warning_reaches_its_holder_through_the_smtp_server(
        store: Database, people: People, tmp_path: Path) -> None:
    # The real time: the outbox writes its deliveries due now.
    clock = Clock(utcnow())
    train = cluster(store, people, "train", timedelta(days=3),
                    conditions=[condition("Ready", True)])
    ending = grant(store, people, people.acme_viewer, train, timedelta(hours=12))
    with store.transaction() as db:  # the grant's times from the clock, not MONDAY_NOON
        row = db.get(KubeconfigGrant, ending)
        assert row is not None
        row.created_at, row.expires_at = clock.now - timedelta(days=2), clock.now + timedelta(
            hours=12)
    assert run_due(scanner(store, clock), "w") == 1

    with smtp_server(tmp_path) as mailbox:
        settings = Settings(env="test", smtp_host=smtp.HOST, smtp_port=mailbox.port,
                            smtp_username=smtp.USERNAME, smtp_password=smtp.PASSWORD,
                            smtp_from=smtp.SENDER, smtp_ca_file=str(mailbox.ca_file),
                            base_url="https://portal.test")
        sender = NotificationSender(settings, store, now=clock)
        clock.now = utcnow()  # what the scan wrote is due now
        Runtime(store, [sender], clock=clock, identity="notify-1").run_pass([NOTIFICATIONS])

        (message,) = mailbox.to("acme-viewer@example.com")
        assert len(mailbox.messages) == 1
    expires = row.expires_at
    assert message["Subject"] == (f"Your kubeconfig for train expires on {expires.day} "
                                  f"{expires:%b %Y} at {expires:%H:%M} UTC")
    plain = message.get_body(("plain",))
    assert plain is not None
    assert "https://portal.test/t/acme/clusters/train" in plain.get_content()
    with store.session() as db:
        assert db.scalars(select(NotificationDelivery.state)).all() == ["delivered"]


# ----- idle GPUs


@pytest.fixture
def idle_fleet(store: Database, people: People) -> None:
    """acme's cluster train (one GPU idle) and dedicated node (idle); globex's rival busy."""
    with store.transaction() as db:
        acme, globex = _get(db, Tenant, people.acme), _get(db, Tenant, people.globex)
        h100 = _get(db, GpuClass, people.h100)
        host = factories.env_host(db)
        ready = [condition("Ready", True)]
        factories.cluster(db, acme, host, "train", gpu_class_id=h100.id, gpus=2, conditions=ready)
        factories.cluster(db, globex, host, "rival", gpu_class_id=h100.id, gpus=1,
                          conditions=ready)
        factories.assignment(db, factories.node(db, host, h100, "ded-1"), acme)
        factories.node(db, host, h100, "pool-1")


def busy_rival() -> Answers:
    answers = fleet.answers()
    answers.instant[fleet.PEAK] = [(labels, 60.0 if labels is fleet.RIVAL else peak)
                                   for labels, peak in answers.instant[fleet.PEAK]]
    return answers


@pytest.fixture
def prometheus() -> Iterator[str]:
    with fake_prometheus(busy_rival()) as url:
        yield url


def test_idle_gpus_tell_the_tenants_admins_once_a_day_by_cluster(
        store: Database, people: People, clock: Clock, idle_fleet: None,
        prometheus: str) -> None:
    kind = scanner(store, clock, prometheus_url=prometheus)
    scan_twice(store, clock, kind)

    assert told(store) == [("gpus.idle", f"gpus.idle:{people.acme}:2026-12-07",
                            sorted([people.acme_admin, people.acme_admin_2]))]
    title, body = subject(store, "gpus.idle")
    assert title == "2 GPUs of acme idle on 7 Dec 2026"
    assert "stayed below 5% utilisation for 30 minutes" in body
    assert "Cluster: train, Idle GPUs: 1" in body
    assert "Cluster: dedicated nodes (no cluster), Idle GPUs: 1" in body
    # Told today, not again: tomorrow is another day.
    clock.now += timedelta(days=1)
    run_due(kind, "w")
    assert [key for _, key, _ in told(store)] == [f"gpus.idle:{people.acme}:2026-12-07",
                                                   f"gpus.idle:{people.acme}:2026-12-08"]


@pytest.mark.parametrize("prometheus_url", [None, "refused"])
def test_without_prometheus_no_idle_notice_and_no_error(
        store: Database, people: People, clock: Clock, idle_fleet: None,
        prometheus_url: str | None) -> None:
    url = refusing_url() if prometheus_url == "refused" else None
    assert run_due(scanner(store, clock, prometheus_url=url), "w") == 1
    assert told(store) == []
    with store.session() as db:
        item = db.get(WorkItem, (NOTIFICATION_SCAN, "all"))
        assert item is not None and item.attempts == 0 and item.last_error is None


def test_the_worker_runs_the_scan(sqlite_database: Database) -> None:
    names = [k.name for k in build_kinds(Settings(env="test"), sqlite_database,
                                         InMemoryConnector())]
    assert NOTIFICATION_SCAN in names
