"""A pass reconciles several clusters at once, never more than PORTAL_WORKER_CONCURRENCY, and
each exactly once (PostgreSQL, separately committed: the threads need their own connections)."""

from __future__ import annotations

import threading
from collections import Counter

from app.clusters import conditions as cond
from app.clusters import repository
from app.clusters.reconciler import ClusterReconciler
from app.database.core import Database
from app.kube.memory import InMemoryKube
from tests.clusters.support import FakeConnector, FakeInstaller, cluster_settings, seed_clusters

CONCURRENCY = 4
CLUSTERS = 8


class GatheringInstaller(FakeInstaller):
    """Each install waits for ``width`` installs to run side by side (a sequential pass would
    wait in vain), and counts how many ever ran at once."""

    def __init__(self, kube: InMemoryKube, width: int) -> None:
        super().__init__(kube)
        self.gathered = threading.Barrier(width, timeout=60)
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0

    def install(self, release: str, namespace: str, values_yaml: str) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            self.gathered.wait()
            super().install(release, namespace, values_yaml)
        finally:
            with self.lock:
                self.running -= 1


def test_a_pass_runs_up_to_the_concurrency_at_once(own_pg_database: Database) -> None:
    ids = seed_clusters(own_pg_database, CLUSTERS)
    kube = InMemoryKube()
    installer = GatheringInstaller(kube, CONCURRENCY)
    settings = cluster_settings(worker_concurrency=CONCURRENCY)
    reconciler = ClusterReconciler(settings, own_pg_database, FakeConnector(kube), installer)
    assert reconciler.concurrency == CONCURRENCY

    assert reconciler.run_due("worker-1") == CLUSTERS
    assert installer.most == CONCURRENCY
    assert Counter(call[1] for call in installer.calls) == {f"c{i}": 1 for i in range(CLUSTERS)}
    with own_pg_database.session() as db:
        clusters = [repository.lock_cluster(db, i) for i in ids]
        assert all(c is not None and cond.is_true(c.conditions, cond.READY) for c in clusters)
        assert all(c is not None and c.lease_owner is None for c in clusters)


def test_one_clusters_crash_does_not_stop_the_others(own_pg_database: Database) -> None:
    ids = seed_clusters(own_pg_database, 3)
    kube = InMemoryKube()
    installer = FakeInstaller(kube)
    real_install = installer.install

    def buggy(release: str, namespace: str, values_yaml: str) -> None:
        if release == "c1":
            raise RuntimeError("a bug, not a helm failure")
        real_install(release, namespace, values_yaml)

    installer.install = buggy  # type: ignore[method-assign]
    reconciler = ClusterReconciler(cluster_settings(worker_concurrency=2), own_pg_database,
                                   FakeConnector(kube), installer)
    assert reconciler.run_due("worker-1") == 3
    with own_pg_database.session() as db:
        ready = {c.name: cond.is_true(c.conditions, cond.READY)
                 for c in (repository.lock_cluster(db, i) for i in ids) if c is not None}
    assert ready == {"c0": True, "c1": False, "c2": True}
