"""Short leases kept by a heartbeat: a long helm run keeps its cluster, a crashed worker's
cluster is adopted once one lease has run out (not after the longest helm run could take), and
a worker whose lease was taken writes nothing more. A fake clock stands in for time; the
heartbeat's beats are called where the thread would call them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.clusters import conditions as cond
from app.database.core import Database
from app.reconcilers.clusters import ClusterReconciler
from app.workqueue import CLUSTERS
from tests.clusters.support import Harness, create
from tests.support.drive import run_due
from tests.support.installers import FakeInstaller
from tests.support.tenancy import Tenancy

LEASE = 30.0  # the default PORTAL_WORKER_LEASE_SECONDS


class WorkerKilled(BaseException):
    """Like SIGKILL: nothing in the worker may catch it."""


def hooked(harness: Harness, during: Callable[[], None]) -> FakeInstaller:
    """Runs ``during`` in the middle of the next install, as if helm took that long."""
    installer = harness.installer

    def once(release: str) -> None:
        installer.during = None
        during()

    installer.during = once
    return installer


def other_worker(harness: Harness, database: Database) -> ClusterReconciler:
    """A second worker process on the same database and host."""
    return ClusterReconciler(harness.reconciler.settings, database, harness.connector,
                             harness.installer, clock=harness.clock)


def ready(harness: Harness, cluster_id: int) -> bool:
    cluster = harness.cluster(cluster_id)
    return cluster is not None and cond.is_true(cluster.conditions, cond.READY)


def test_the_default_lease_is_short(harness: Harness) -> None:
    assert harness.reconciler.settings.worker_lease_seconds == LEASE


def test_the_heartbeat_keeps_a_helm_run_longer_than_the_lease(
    harness: Harness, tenancy: Tenancy, database: Database
) -> None:
    created = create(harness.database, tenancy)
    other = other_worker(harness, database)
    taken_by_other: list[int] = []

    def helm_takes_two_minutes() -> None:
        leases = harness.leases()
        for _ in range(12):  # a beat every 10 s, as the heartbeat thread does
            harness.clock.advance(LEASE / 3)
            leases.renew_now()
            taken_by_other.append(run_due(other, "worker-2"))
        assert not leases.lost((CLUSTERS, str(created.id)))

    installer = hooked(harness, helm_takes_two_minutes)
    harness.run("worker-1")
    assert taken_by_other == [0] * 12
    assert ready(harness, created.id)
    assert installer.installs == 1
    assert harness.item(created.id).lease_owner is None  # released at the end


def test_a_worker_killed_during_helm_is_adopted_after_one_lease(
    harness: Harness, tenancy: Tenancy, database: Database
) -> None:
    created = create(harness.database, tenancy)

    def killed() -> None:
        raise WorkerKilled

    installer = hooked(harness, killed)
    with pytest.raises(WorkerKilled):
        harness.run("worker-1")
    successor = other_worker(harness, database)
    harness.clock.advance(LEASE - 1)
    assert run_due(successor, "worker-2") == 0  # the dead worker's lease still holds
    harness.clock.advance(2)  # nothing renewed it: it ran out with the lease, not 300 s later
    assert run_due(successor, "worker-2") == 1
    assert ready(harness, created.id)
    assert installer.installs == 1  # the killed run never finished its install


def test_a_worker_whose_lease_was_taken_writes_nothing_more(
    harness: Harness, tenancy: Tenancy, database: Database
) -> None:
    created = create(harness.database, tenancy)
    successor = other_worker(harness, database)
    calls_after_takeover: list[int] = []

    def stalled_past_the_lease() -> None:
        # The heartbeat could not renew (the process was frozen): the lease runs out and the
        # other worker adopts the cluster and converges it.
        harness.clock.advance(LEASE + 1)
        assert run_due(successor, "worker-2") == 1
        assert ready(harness, created.id)
        leases = harness.leases()
        leases.renew_now()  # the next beat finds the lease taken
        assert leases.lost((CLUSTERS, str(created.id)))
        calls_after_takeover.append(len(harness.kube.calls))

    installer = hooked(harness, stalled_past_the_lease)
    before = harness.cluster(created.id)
    harness.run("worker-1")

    assert len(harness.kube.calls) == calls_after_takeover[0]  # no call to the host at all
    after = harness.cluster(created.id)
    assert after is not None and before is not None
    assert ready(harness, created.id) and harness.item(created.id).lease_owner is None
    assert after.observed_generation == 1 and after.failed_attempts == 0
    assert installer.installs == 2  # the successor's; the first worker's helm run ends unused


def test_without_a_beat_the_database_still_refuses_the_old_holder(
    harness: Harness, tenancy: Tenancy, database: Database
) -> None:
    created = create(harness.database, tenancy)
    successor = other_worker(harness, database)
    adopted_state: list[object] = []

    def stalled_past_the_lease() -> None:
        harness.clock.advance(LEASE + 1)
        run_due(successor, "worker-2")
        cluster = harness.cluster(created.id)
        assert cluster is not None
        adopted_state.append((cluster.conditions, cluster.admin_kubeconfig_encrypted,
                              harness.due_at(created.id)))

    hooked(harness, stalled_past_the_lease)
    harness.run("worker-1")  # its writes are fenced on its claim's token and refused
    cluster = harness.cluster(created.id)
    assert cluster is not None
    assert adopted_state == [(cluster.conditions, cluster.admin_kubeconfig_encrypted,
                              harness.due_at(created.id))]
