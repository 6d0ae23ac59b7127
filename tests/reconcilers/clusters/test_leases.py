"""Leases: parallel workers never hold one cluster at once (PostgreSQL, SKIP LOCKED), and the
conditional UPDATE does the same on the embedded SQLite default. The clusters are queued by the
service that creates them; the runtime's queue hands them out."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from app.clusters import repository
from app.database.core import Database, utcnow
from app.kube.memory import InMemoryKube
from app.reconcilers.clusters import ClusterReconciler
from app.workqueue import CLUSTERS as CLUSTER_KIND
from app.workqueue import repository as queue
from tests.clusters.support import FakeConnector, cluster_settings, fake_installer, seed_clusters
from tests.support.drive import run_due
from tests.support.waiting import HANG_SECONDS

WORKERS = 8
CLUSTERS = 40


def claim_in_parallel(database: Database) -> list[list[int]]:
    barrier = threading.Barrier(WORKERS)
    now = utcnow()

    def claim(worker: int) -> list[int]:
        barrier.wait()
        with database.transaction() as db:
            claimed = queue.claim(db, [CLUSTER_KIND], f"w{worker}", now,
                                  now + timedelta(seconds=60), 10)
        return [int(item.key) for item in claimed]

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return list(pool.map(claim, range(WORKERS)))


def test_parallel_claims_on_postgresql_are_disjoint(own_pg_database: Database) -> None:
    seed_clusters(own_pg_database, CLUSTERS)
    claims = claim_in_parallel(own_pg_database)
    taken = Counter(cluster_id for claim in claims for cluster_id in claim)
    assert max(taken.values()) == 1
    assert len(taken) == CLUSTERS  # SKIP LOCKED: nobody waited, nobody came back empty-handed
    assert claim_in_parallel(own_pg_database) == [[]] * WORKERS  # all leases are live


@pytest.mark.sqlite
def test_claims_on_sqlite_never_take_a_held_cluster(sqlite_database: Database) -> None:
    seed_clusters(sqlite_database, CLUSTERS)
    claims = claim_in_parallel(sqlite_database)
    taken = Counter(cluster_id for claim in claims for cluster_id in claim)
    assert max(taken.values()) == 1
    assert len(taken) == CLUSTERS


def test_parallel_workers_provision_each_cluster_exactly_once(own_pg_database: Database) -> None:
    ids = seed_clusters(own_pg_database, CLUSTERS)
    kube = InMemoryKube()
    installer = fake_installer(kube)
    installer.during = lambda release: time.sleep(0.005)  # long enough for a rival to overlap
    reconcilers = [ClusterReconciler(cluster_settings(), own_pg_database, FakeConnector(kube),
                                     installer) for _ in range(WORKERS)]
    barrier = threading.Barrier(WORKERS)

    def provisioned() -> bool:
        with own_pg_database.session() as db:
            return all(repository.lock_cluster(db, i).observed_generation == 1  # type: ignore[union-attr]
                       for i in ids)

    def work(index: int) -> None:
        # Until every cluster is provisioned: one that waited for its tenant's queue (made
        # by another worker meanwhile) is due again a moment later.
        barrier.wait()
        deadline = time.monotonic() + HANG_SECONDS
        while not provisioned() and time.monotonic() < deadline:
            if run_due(reconcilers[index], f"worker-{index}") == 0:
                time.sleep(0.2)

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        list(pool.map(work, range(WORKERS)))
    assert installer.overlaps == 0
    assert Counter(call[1] for call in installer.calls) == {f"c{i}": 1 for i in range(CLUSTERS)}
    with own_pg_database.session() as db:
        assert all(repository.lock_cluster(db, i).observed_generation == 1  # type: ignore[union-attr]
                   for i in ids)
