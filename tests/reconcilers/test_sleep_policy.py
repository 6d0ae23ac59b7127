"""The worker's sleep-policy kind on a fixed clock: idle clusters sleep, scheduled ones sleep
and wake with their windows, long-sleeping ones are announced, then deleted; audited."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.clusters import power
from app.clusters.models import VirtualCluster
from app.database.core import Database
from app.kit.config import Settings
from app.process.worker import build_kinds
from app.reconcilers.sleep_policy import SleepPolicyReconciler
from app.tenants.models import Tenant
from app.usage.models import HourlyUsage, UsageSample
from app.workqueue import CLUSTERS, SLEEP_POLICY
from app.workqueue import repository as queue
from tests import factories
from tests.support.drive import run_due
from tests.support.kube import InMemoryConnector
from tests.support.tenancy import build_tenancy

MONDAY_NOON = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = MONDAY_NOON

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def kind(database: Database, clock: Clock, **settings: Any) -> SleepPolicyReconciler:
    return SleepPolicyReconciler(Settings(env="test", **settings), database, clock=clock)


def make_cluster(database: Database, name: str = "train", **fields: Any) -> int:
    """A cluster of acme (made on first use), two hours old unless said otherwise."""
    fields.setdefault("created_at", MONDAY_NOON - timedelta(hours=2))
    with database.transaction() as db:
        tenant = db.scalar(select(Tenant).where(Tenant.slug == "acme")) or factories.tenant(
            db, "acme")
        return factories.cluster(db, tenant, factories.host_cluster(db), name, **fields).id


def sample(database: Database, cluster_id: int, at: datetime, used: float,
           source: str = "queue") -> None:
    with database.transaction() as db:
        tenant_id = db.scalar(select(VirtualCluster.tenant_id).where(
            VirtualCluster.id == cluster_id))
        assert tenant_id is not None
        db.add(UsageSample(taken_s=int(at.timestamp()), source=source, tenant_id=tenant_id,
                           subject_id=cluster_id, used_gpus=used))


def cluster(database: Database, cluster_id: int) -> VirtualCluster:
    with database.session() as db:
        row = db.get(VirtualCluster, cluster_id)
        assert row is not None
        db.expunge(row)
        return row


def events(database: Database, action: str) -> list[AuditEvent]:
    with database.session() as db:
        return list(db.scalars(select(AuditEvent).where(AuditEvent.action == action)
                               .order_by(AuditEvent.id)))


# ----- idle


def test_an_idle_cluster_sleeps_once_and_the_worker_is_asked(
    database: Database, clock: Clock
) -> None:
    train = make_cluster(database, sleep_after_idle_minutes=30, generation=1)
    sample(database, train, MONDAY_NOON - timedelta(minutes=45), 2)  # busy before its minutes
    sample(database, train, MONDAY_NOON - timedelta(minutes=20), 0)
    reconciler = kind(database, clock)
    assert run_due(reconciler, "w") == 1
    after = cluster(database, train)
    assert (after.power, after.power_reason, after.generation) == ("asleep", "idle", 2)
    [event] = events(database, "virtual_cluster.sleep")
    assert (event.actor_id, event.actor_label, event.target_id) == (
        None, "sleep-policy", str(train))
    with database.session() as db:
        assert str(train) in [item.key for item in queue.items(db, CLUSTERS)]
    clock.now += timedelta(minutes=1)
    queue_due_now(database)
    run_due(reconciler, "w")
    assert len(events(database, "virtual_cluster.sleep")) == 1


def queue_due_now(database: Database) -> None:
    with database.transaction() as db:
        queue.enqueue(db, SLEEP_POLICY, "all", at=MONDAY_NOON - timedelta(days=30))


@pytest.mark.parametrize(("case", "fields", "samples"), [
    ("a GPU pod bound in its minutes", {}, [(-40, 0), (-10, 1)]),
    ("a GPU pod waiting (its namespace quota counts it)", {}, [(-10, 0), (-5, 1, "quota")]),
    ("not sampled in its minutes: its host was not read", {}, [(-45, 0)]),
    ("woken 10 minutes ago", {"power_changed_at": MONDAY_NOON - timedelta(minutes=10)},
     [(-5, 0)]),
    ("created 20 minutes ago", {"created_at": MONDAY_NOON - timedelta(minutes=20)}, [(-5, 0)]),
    ("never to sleep", {"never_sleep": True}, [(-5, 0)]),
    ("without idle minutes", {"sleep_after_idle_minutes": None}, [(-5, 0)]),
])
def test_a_cluster_stays_awake_with(database: Database, clock: Clock, case: str,
                                    fields: dict[str, Any], samples: list[Any]) -> None:
    train = make_cluster(database, **{"sleep_after_idle_minutes": 30, **fields})
    for minutes, used, *source in samples:
        sample(database, train, MONDAY_NOON + timedelta(minutes=minutes), used, *source)
    run_due(kind(database, clock), "w")
    assert cluster(database, train).power == "awake", case


def test_idle_minutes_beyond_the_raw_samples_read_the_hourly_ones(
    database: Database, clock: Clock
) -> None:
    train = make_cluster(database, sleep_after_idle_minutes=3 * 24 * 60,
                         created_at=MONDAY_NOON - timedelta(days=5))
    sample(database, train, MONDAY_NOON - timedelta(minutes=5), 0)
    hour_s = int((MONDAY_NOON - timedelta(days=2, hours=12)).timestamp()) // 3600 * 3600
    with database.transaction() as db:
        tenant_id = cluster(database, train).tenant_id
        db.add(HourlyUsage(hour_s=hour_s, source="queue", tenant_id=tenant_id, subject_id=train,
                           samples=12, mean_used_gpus=0.5, peak_used_gpus=1))
    run_due(kind(database, clock), "w")
    assert cluster(database, train).power == "awake"
    clock.now += timedelta(days=1)
    sample(database, train, clock.now - timedelta(minutes=5), 0)
    queue_due_now(database)
    run_due(kind(database, clock), "w")
    assert cluster(database, train).power == "asleep"


# ----- schedule


NIGHTS = "weekdays 20:00-08:00, weekends"


def test_the_schedule_puts_it_to_sleep_in_its_window_and_wakes_it_after(
    database: Database, clock: Clock
) -> None:
    train = make_cluster(database, sleep_schedule=NIGHTS, sleep_timezone="Europe/Berlin")
    reconciler = kind(database, clock)
    run_due(reconciler, "w")
    assert cluster(database, train).power == "awake"  # 13:00 in Berlin
    clock.now = datetime(2026, 12, 7, 19, 0, tzinfo=UTC)  # 20:00 in Berlin
    queue_due_now(database)
    run_due(reconciler, "w")
    asleep = cluster(database, train)
    assert (asleep.power, asleep.power_reason) == ("asleep", "schedule")
    clock.now = datetime(2026, 12, 8, 6, 59, tzinfo=UTC)  # 07:59
    queue_due_now(database)
    run_due(reconciler, "w")
    assert cluster(database, train).power == "asleep"
    clock.now = datetime(2026, 12, 8, 7, 0, tzinfo=UTC)  # 08:00
    queue_due_now(database)
    run_due(reconciler, "w")
    awake = cluster(database, train)
    assert (awake.power, awake.power_reason) == ("awake", "schedule")
    assert [e.actor_label for e in events(database, "virtual_cluster.wake")] == ["sleep-policy"]


def test_the_schedule_wakes_only_what_it_put_to_sleep(database: Database, clock: Clock) -> None:
    train = make_cluster(database, sleep_schedule="daily 00:00-06:00", power="asleep",
                         power_reason="manual", power_changed_at=MONDAY_NOON)
    run_due(kind(database, clock), "w")
    assert cluster(database, train).power == "asleep"


def test_someone_who_wakes_it_in_its_window_keeps_it_awake_until_the_next(
    database: Database, clock: Clock
) -> None:
    clock.now = datetime(2026, 12, 7, 22, 0, tzinfo=UTC)
    train = make_cluster(database, sleep_schedule="daily 20:00-08:00",
                         power_changed_at=datetime(2026, 12, 7, 21, 0, tzinfo=UTC),
                         power_reason="kubeconfig")
    reconciler = kind(database, clock)
    run_due(reconciler, "w")
    assert cluster(database, train).power == "awake"
    clock.now = datetime(2026, 12, 8, 20, 0, tzinfo=UTC)
    queue_due_now(database)
    run_due(reconciler, "w")
    assert cluster(database, train).power == "asleep"


def test_a_schedule_removed_or_never_sleep_wakes_what_it_put_to_sleep(
    database: Database, clock: Clock
) -> None:
    train = make_cluster(database, power="asleep", power_reason="schedule",
                         power_changed_at=MONDAY_NOON - timedelta(hours=1))
    run_due(kind(database, clock), "w")
    assert cluster(database, train).power == "awake"


# ----- deletion after days asleep


def test_a_long_sleeping_cluster_is_announced_then_deleted(
    database: Database, clock: Clock
) -> None:
    asleep_since = MONDAY_NOON - timedelta(days=14)
    train = make_cluster(database, power="asleep", power_reason="idle",
                         power_changed_at=asleep_since, asleep_since=asleep_since,
                         delete_after_sleep_days=14, generation=3)
    clock.now = asleep_since + timedelta(days=13, hours=23)  # within a day of it
    reconciler = kind(database, clock, sleep_delete_warning_hours=24)
    run_due(reconciler, "w")
    warned = cluster(database, train)
    assert warned.deletion_warned_at == clock.now
    # Announced late (23 h before): deleted no sooner than a day after the announcement.
    assert warned.deletion_due_at == clock.now + timedelta(hours=24)
    [warning] = events(database, "virtual_cluster.deletion_warning")
    assert warning.actor_label == "sleep-policy" and warning.after is not None
    assert warning.after["deletes_at"] == (clock.now + timedelta(hours=24)).isoformat()
    clock.now = asleep_since + timedelta(days=14, minutes=30)
    queue_due_now(database)
    run_due(reconciler, "w")
    assert cluster(database, train).deletion_requested_at is None
    clock.now = asleep_since + timedelta(days=14, hours=23)
    queue_due_now(database)
    run_due(reconciler, "w")
    deleted = cluster(database, train)
    assert deleted.deletion_requested_at is not None and deleted.generation == 4
    [event] = events(database, "virtual_cluster.delete")
    assert (event.actor_id, event.actor_label) == (None, "sleep-policy")
    assert len(events(database, "virtual_cluster.deletion_warning")) == 1


def test_the_announcement_comes_the_warning_time_before(database: Database,
                                                        clock: Clock) -> None:
    asleep_since = MONDAY_NOON - timedelta(days=6, hours=12)
    train = make_cluster(database, power="asleep", power_reason="manual",
                         asleep_since=asleep_since, delete_after_sleep_days=7)
    reconciler = kind(database, clock, sleep_delete_warning_hours=6)
    run_due(reconciler, "w")
    assert cluster(database, train).deletion_warned_at is None  # 12 h before
    clock.now += timedelta(hours=6)
    queue_due_now(database)
    run_due(reconciler, "w")
    warned = cluster(database, train)
    assert warned.deletion_due_at == asleep_since + timedelta(days=7)
    clock.now = warned.deletion_due_at
    queue_due_now(database)
    run_due(reconciler, "w")
    assert cluster(database, train).deletion_requested_at is not None


@pytest.mark.parametrize("fields", [
    {"never_sleep": True}, {"asleep_since": None}, {"delete_after_sleep_days": None}])
def test_no_deletion_without_its_rule_or_before_it_fell_asleep(
    database: Database, clock: Clock, fields: dict[str, Any]
) -> None:
    train = make_cluster(database, **{
        "power": "asleep", "power_reason": "manual", "delete_after_sleep_days": 1,
        "asleep_since": MONDAY_NOON - timedelta(days=30), **fields})
    run_due(kind(database, clock), "w")
    after = cluster(database, train)
    assert after.deletion_warned_at is None and after.deletion_requested_at is None


def test_waking_withdraws_the_announcement(db: Session) -> None:
    t = build_tenancy(db)
    train = factories.cluster(db, t.acme, factories.host_cluster(db), power="asleep",
                              deletion_warned_at=MONDAY_NOON, deletion_due_at=MONDAY_NOON)
    power.request(db, train, "awake", "manual", actor_id=None, actor_label="test")
    assert train.deletion_warned_at is None and train.deletion_due_at is None


def test_the_worker_runs_the_kind(database: Database) -> None:
    kinds = build_kinds(Settings(env="test"), database, InMemoryConnector(None))
    assert SLEEP_POLICY in [k.name for k in kinds]


def test_a_demonstration_runs_the_policies_faster_and_still_reads_the_latest_sample(
    database: Database, clock: Clock
) -> None:
    """PORTAL_SLEEP_POLICY_SPEEDUP (the lab's 720): 5 idle minutes pass in under a second, and
    a cluster whose latest sample (15 s old, standing until the next) shows a GPU pod bound is
    busy, one whose latest sample shows none is idle."""
    busy = make_cluster(database, "busy", sleep_after_idle_minutes=5,
                        created_at=MONDAY_NOON - timedelta(minutes=1))
    idle = make_cluster(database, "idle", sleep_after_idle_minutes=5,
                        created_at=MONDAY_NOON - timedelta(minutes=1))
    sample(database, busy, MONDAY_NOON - timedelta(seconds=15), 1)
    sample(database, idle, MONDAY_NOON - timedelta(seconds=40), 1)
    sample(database, idle, MONDAY_NOON - timedelta(seconds=15), 0)
    run_due(kind(database, clock, sleep_policy_speedup=720, worker_resync_seconds=15), "w")
    assert (cluster(database, busy).power, cluster(database, idle).power) == ("awake", "asleep")
