"""The allocation ledger: written by every path that changes quota, nodes or clusters, in the
same transaction, append-only, and GPU-hours from it exact to the second."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.clusters import repository as cluster_rows
from app.clusters.models import VirtualCluster
from app.database.core import Database
from app.hosts.models import HostCluster
from app.kit.config import Settings
from app.kit.errors import NotFound
from app.nodes import service as nodes
from app.nodes.models import Node
from app.nodes.schemas import AssignmentIn
from app.reconcilers.quota_expiry import QuotaExpiryReconciler
from app.usage import service as usage
from app.usage.models import LedgerEntry
from tests import factories
from tests.support.drive import run_due
from tests.support.tenancy import Tenancy, build_tenancy
from tests.usage.support import (
    T0,
    LedgerClock,
    approve_quota,
    create_cluster,
    delete_cluster,
    entries,
    fix_clock,
    report,
    resize_cluster,
)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


def test_create_resize_and_delete_give_exact_gpu_hours(db: Session, clock: LedgerClock) -> None:
    t = build_tenancy(db)
    approve_quota(db, t, 8)
    clock.at(hours=1)
    cluster_id = create_cluster(db, t, "train", 4)
    clock.at(hours=3, seconds=17)
    resize_cluster(db, t, "train", 6)
    clock.at(hours=5)
    delete_cluster(db, t, "train")
    clock.at(hours=6)
    cluster_rows.delete_cluster_row(db, cluster_id)  # the reconciler, once all is torn down
    assert entries(db, "cluster") == [("cluster", "train", 4, T0 + timedelta(hours=1)),
                                      ("cluster", "train", 6, T0 + timedelta(hours=3, seconds=17)),
                                      ("cluster", "train", 0, T0 + timedelta(hours=5))]
    clock.at(hours=10)
    [row] = report(db, t.principal(t.platform_admin)).rows
    assert row.allocated_gpu_seconds == 4 * (2 * 3600 + 17) + 6 * (2 * 3600 - 17)
    assert row.allocated_gpu_hours == pytest.approx(20.0 - 2 * 17 / 3600, abs=1e-6)
    assert row.approved_gpu_hours == 80.0  # 8 GPUs since midnight, ten hours on
    assert (row.tenant, row.gpu_class, row.period) == ("acme", t.h100.product, "2026-11-02")


def test_a_cluster_row_removed_without_a_deletion_request_ends_its_interval(
    db: Session, clock: LedgerClock
) -> None:
    t = build_tenancy(db)
    approve_quota(db, t, 8)
    cluster_id = create_cluster(db, t, "train", 3)
    clock.at(hours=2)
    cluster_rows.delete_cluster_row(db, cluster_id)
    assert [e[2] for e in entries(db, "cluster")] == [3, 0]
    clock.at(hours=4)
    assert report(db, t.principal(t.platform_admin)).rows[0].allocated_gpu_hours == 6.0


def test_changes_that_leave_the_gpus_alone_write_nothing(db: Session, clock: LedgerClock) -> None:
    t = build_tenancy(db)
    approve_quota(db, t, 8)
    cluster_id = create_cluster(db, t, "train", 2)
    cluster = db.get(VirtualCluster, cluster_id)
    assert cluster is not None
    cluster.conditions = [{"type": "Ready", "status": "True"}]
    cluster.memory_mib = 4096
    db.flush()
    cluster_rows.update_status(db, cluster_id, endpoint="https://x")
    assert len(entries(db)) == 2  # the quota and the cluster's creation


def test_quota_approval_and_expiry_by_the_worker_are_recorded(
    database: Database, clock: LedgerClock
) -> None:
    with database.transaction() as db:
        t = build_tenancy(db)
        approve_quota(db, t, 8)
        clock.at(hours=1)
        burst = approve_quota(db, t, 4)
        burst.ends_at = T0  # long past: the expiry job takes it back at its next pass
        admin = t.principal(t.platform_admin)
    clock.at(hours=3)
    expiry = QuotaExpiryReconciler(Settings(env="test", database_url="sqlite://"), database,
                                   clock=clock)
    assert run_due(expiry, "worker-1") == 1
    clock.at(hours=5)
    with database.session() as db:
        assert [e[2] for e in entries(db, "quota")] == [8, 12, 8]
        [row] = report(db, admin).rows
    assert row.approved_gpu_hours == 8 * 1 + 12 * 2 + 8 * 2


def _node(db: Session, t: Tenancy) -> tuple[str, str]:
    node = db.scalars(select(Node).where(Node.gpu_class_id == t.h100.id).order_by(Node.id)).first()
    assert node is not None
    host = db.get(HostCluster, node.host_cluster_id)
    assert host is not None
    return node.name, host.name


def test_dedicated_nodes_count_from_assignment_to_release_or_loss(
    db: Session, clock: LedgerClock
) -> None:
    t = build_tenancy(db)
    approve_quota(db, t, 16)
    admin = t.principal(t.platform_admin)
    name, host = _node(db, t)
    nodes.assign_node(db, admin, name, AssignmentIn(tenant="acme"), host)
    clock.at(hours=2)
    nodes.end_assignment(db, admin, name, host)  # a bulk UPDATE: seen all the same
    clock.at(hours=3)
    nodes.assign_node(db, admin, name, AssignmentIn(tenant="acme"), host)
    clock.at(hours=4)
    node = db.scalar(select(Node).where(Node.name == name))
    assert node is not None
    node.gone_at = clock.now  # as the inventory sync marks a vanished node
    db.flush()
    clock.at(hours=6)
    assert [e[2] for e in entries(db, "node")] == [8, 0, 8, 0]
    [row] = report(db, admin).rows
    assert row.dedicated_gpu_hours == 8 * 2 + 8 * 1


def test_a_change_rolled_back_leaves_no_entry(database: Database, clock: LedgerClock) -> None:
    with database.transaction() as db:
        t = build_tenancy(db)
        approve_quota(db, t, 8)
    def failing_request() -> None:
        with database.transaction() as db:
            create_cluster(db, t, "train", 4)
            raise RuntimeError("the request failed after the flush")

    with pytest.raises(RuntimeError):
        failing_request()
    with database.session() as db:
        assert entries(db, "cluster") == []


def test_days_split_at_midnight_and_months_sum_the_days(db: Session, clock: LedgerClock) -> None:
    t = build_tenancy(db)
    approve_quota(db, t, 8)
    clock.at(hours=22)
    create_cluster(db, t, "train", 2)
    clock.at(hours=27)
    delete_cluster(db, t, "train")
    clock.at(days=3)
    admin = t.principal(t.platform_admin)
    by_day = report(db, admin, days=3).rows
    assert [(r.period, r.allocated_gpu_hours) for r in by_day] == [
        ("2026-11-02", 4.0), ("2026-11-03", 6.0), ("2026-11-04", 0.0)]
    [month] = report(db, admin, days=3, group_by="month").rows
    assert month.period == "2026-11"
    assert month.allocated_gpu_hours == 10.0
    assert month.approved_gpu_hours == sum(r.approved_gpu_hours for r in by_day) == 8 * 72


def test_the_future_is_not_counted(db: Session, clock: LedgerClock) -> None:
    t = build_tenancy(db)
    approve_quota(db, t, 8)
    clock.at(hours=12)
    [row] = report(db, t.principal(t.platform_admin), days=30).rows
    assert row.approved_gpu_hours == 96.0


def test_a_tenant_sees_only_its_own_usage(db: Session, clock: LedgerClock) -> None:
    t = build_tenancy(db)
    approve_quota(db, t, 8)
    approve_quota(db, t, 2, slug="globex", requester=t.principal(t.globex_admin))
    clock.at(hours=1)
    assert {r.tenant for r in report(db, t.principal(t.platform_admin)).rows} == {"acme",
                                                                                 "globex"}
    assert [r.tenant for r in report(db, t.principal(t.acme_viewer)).rows] == ["acme"]
    with pytest.raises(NotFound):
        report(db, t.principal(t.acme_admin), tenant="globex")


@pytest.mark.parametrize("backend", ["database", "sqlite_database"])
def test_the_ledger_cannot_be_changed_or_deleted(
    backend: str, request: pytest.FixtureRequest, clock: LedgerClock
) -> None:
    database: Database = request.getfixturevalue(backend)
    with database.session() as db:
        tenant = factories.tenant(db)
        factories.quota(db, tenant, factories.gpu_class(db), 4)
        [entry] = db.scalars(select(LedgerEntry)).all()
        for statement in ("UPDATE usage_ledger SET gpus = 99", "DELETE FROM usage_ledger"):
            with pytest.raises(DBAPIError, match="append-only"), db.begin_nested():
                db.execute(text(statement))
        db.expire_all()
        assert db.get(LedgerEntry, entry.id) is not None
        assert db.scalars(select(LedgerEntry.gpus)).all() == [4]


def test_gpu_hours_survive_a_worker_restart_on_sqlite(
    sqlite_database: Database, clock: LedgerClock
) -> None:
    with sqlite_database.transaction() as db:
        t = build_tenancy(db)
        approve_quota(db, t, 8)
        clock.at(hours=1)
        create_cluster(db, t, "train", 4)
        admin = t.principal(t.platform_admin)
    sqlite_database.dispose()  # the worker and the app go away; only the database remains
    clock.at(hours=7)
    restarted = Database(sqlite_database.url)
    try:
        with restarted.transaction() as db:
            resize_cluster(db, t, "train", 1)
        clock.at(hours=9)
        with restarted.session() as db:
            [row] = report(db, admin).rows
    finally:
        restarted.dispose()
    assert (row.allocated_gpu_hours, row.approved_gpu_hours) == (4 * 6 + 1 * 2, 72.0)


def test_gpu_hours_per_cluster_over_any_span(db: Session, clock: LedgerClock) -> None:
    t = build_tenancy(db)
    approve_quota(db, t, 8)
    train = create_cluster(db, t, "train", 4)
    clock.at(hours=1)
    serve = create_cluster(db, t, "serve", 2)
    clock.at(hours=2, minutes=30)
    delete_cluster(db, t, "train")
    clock.at(hours=5)
    viewer = t.principal(t.acme_viewer)
    found = usage.seconds_by_cluster(db, viewer, "acme", T0 + timedelta(minutes=30),
                                     T0 + timedelta(hours=4))
    assert {row.cluster_id: row.seconds for row in found} == {
        train: 4 * 2 * 3600.0, serve: 2 * 3 * 3600.0}
    with pytest.raises(NotFound):
        usage.seconds_by_cluster(db, t.principal(t.globex_admin), "acme", T0, clock.now)
