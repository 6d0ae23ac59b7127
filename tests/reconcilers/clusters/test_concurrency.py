"""The worker reconciles several clusters of one host at once, as many as the host's share of
PORTAL_WORKER_CONCURRENCY (half) and never more, and each exactly once (PostgreSQL, separately
committed: the threads need their own connections)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from app.clusters import conditions as cond
from app.clusters import repository
from app.database.core import Database
from app.kube.memory import InMemoryKube
from app.reconcilers.clusters import ClusterReconciler
from app.reconcilers.runtime import Runtime
from app.workqueue import CLUSTERS as CLUSTER_KIND
from app.workqueue import repository as queue
from app.workqueue.models import WorkItem
from tests.clusters.support import FakeConnector, cluster_settings, fake_installer, seed_clusters
from tests.support.drive import beside
from tests.support.waiting import wait_for

CONCURRENCY = 8
HOST_SHARE = CONCURRENCY // 2
CLUSTERS = 8


def ready(database: Database, ids: list[int]) -> dict[str, bool]:
    with database.session() as db:
        return {c.name: cond.is_true(c.conditions, cond.READY)
                for c in (repository.lock_cluster(db, i) for i in ids) if c is not None}


def work_until(runtime: Runtime, done: Callable[[], bool]) -> None:
    """Runs the worker loop in a thread until ``done()``, then stops it gracefully."""
    thread = threading.Thread(target=runtime.run, name="worker-under-test")
    thread.start()
    try:
        wait_for(lambda: done() or None, "the worker to get there", timeout=60)
    finally:
        runtime.stop()
        thread.join(30)
    assert not thread.is_alive()


def test_the_worker_runs_a_hosts_share_of_the_concurrency_at_once(
        own_pg_database: Database) -> None:
    ids = seed_clusters(own_pg_database, CLUSTERS)
    kube = InMemoryKube()
    installer = fake_installer(kube)
    # Each install waits for a host's share to run side by side (a sequential pass would wait
    # in vain).
    gathered = threading.Barrier(HOST_SHARE, timeout=60)
    installer.during = lambda release: gathered.wait()
    settings = cluster_settings(worker_concurrency=CONCURRENCY)
    reconciler = ClusterReconciler(settings, own_pg_database, FakeConnector(kube), installer)
    runtime = Runtime(own_pg_database, [*beside(reconciler), reconciler],
                      concurrency=CONCURRENCY, poll_seconds=0.1)
    assert runtime.concurrency == CONCURRENCY

    work_until(runtime, lambda: all(ready(own_pg_database, ids).values()))
    assert installer.most == HOST_SHARE
    assert Counter(call[1] for call in installer.calls) == {f"c{i}": 1 for i in range(CLUSTERS)}
    with own_pg_database.session() as db:
        assert all(item.lease_owner is None for item in queue.items(db, CLUSTER_KIND))


def test_one_clusters_crash_does_not_stop_the_others(own_pg_database: Database) -> None:
    ids = seed_clusters(own_pg_database, 3)
    kube = InMemoryKube()
    installer = fake_installer(kube)

    def buggy(release: str) -> None:
        if release == "c1":
            raise RuntimeError("a bug, not a helm failure")

    installer.during = buggy
    reconciler = ClusterReconciler(cluster_settings(), own_pg_database, FakeConnector(kube),
                                   installer)
    runtime = Runtime(own_pg_database, [*beside(reconciler), reconciler], concurrency=2,
                      poll_seconds=0.1)
    def crashed() -> WorkItem | None:
        with own_pg_database.session() as db:
            found = db.get(WorkItem, (CLUSTER_KIND, str(ids[1])))
        return found if found is not None and found.attempts else None

    work_until(runtime, lambda: ready(own_pg_database, ids) == {"c0": True, "c1": False,
                                                                "c2": True} and bool(crashed()))
    crashed_item = crashed()
    assert crashed_item is not None
    # The bug is retried with backoff, and what it said is kept for the operator.
    assert crashed_item.last_error == "RuntimeError: a bug, not a helm failure"
