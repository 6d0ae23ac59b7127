"""A worker process SIGKILLed in the middle of ``helm upgrade --install`` loses its cluster to
another worker once its short lease runs out, not after the longest helm run could take (it
was 300 s plus the lease). While it lives, its heartbeat keeps the cluster through a helm run
several leases long.

Real processes (``tests.support.cluster_worker``: the worker loop with the cluster reconciler,
the real ``HelmInstaller`` running the stand-in ``helm``, which hangs for the first worker),
real PostgreSQL (a committed database: the workers are other processes), the real host API
server with KAI's Queue CRD, and the second API server as the virtual cluster, so the adopted
cluster turns Ready.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from app.clusters import conditions as cond
from app.clusters.models import VirtualCluster
from app.database.core import Database
from app.kube.adapter import KubernetesAdapter
from app.workqueue import CLUSTERS
from app.workqueue.models import WorkItem
from tests.clusters.cleanup import remove_tenant_objects
from tests.clusters.standin_helm import helm_calls, install_standin_helm
from tests.clusters.support import seed_clusters
from tests.support.cluster_worker import WorkerProcess, worker_env
from tests.support.kube_server import ApiServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kube_server

LEASE = 6.0
# Generous for a loaded machine; what it rules out is the old 300 s + lease.
ADOPTION_BOUND = LEASE + 60.0


def row(database: Database, cluster_id: int) -> VirtualCluster:
    with database.session() as db:
        found = db.scalar(select(VirtualCluster).where(VirtualCluster.id == cluster_id))
    assert found is not None
    return found


def upgrades(log: Path) -> int:
    return [call["argv"][0] for call in helm_calls(log)].count("upgrade")  # type: ignore[index]


@pytest.fixture
def slug(host_admin: KubernetesAdapter) -> Iterator[str]:
    slug = f"crash-{secrets.token_hex(3)}"
    yield slug
    remove_tenant_objects(host_admin, slug)


def lease(database: Database, cluster_id: int) -> WorkItem:
    """The cluster's work item: who holds it, until when."""
    with database.session() as db:
        found = db.get(WorkItem, (CLUSTERS, str(cluster_id)))
    assert found is not None
    return found


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop()


def test_a_worker_killed_during_helm_is_adopted_within_the_lease(
    own_pg_database: Database, kai_host: ApiServer, virtual_api: ApiServer, slug: str,
    workers: list[WorkerProcess], tmp_path: Path,
) -> None:
    [cluster_id] = seed_clusters(own_pg_database, 1, slug)
    vcluster_kubeconfig = tmp_path / "vcluster.kubeconfig"
    vcluster_kubeconfig.write_text(virtual_api.admin_kubeconfig)
    log, hanging = tmp_path / "helm-calls.jsonl", tmp_path / "helm-hangs"
    env = worker_env(
        database_url=own_pg_database.url, lease_seconds=LEASE,
        kubeconfig=kai_host.write_admin_kubeconfig(tmp_path / "host.kubeconfig"),
        helm=install_standin_helm(tmp_path / "bin"), HELM_STANDIN_LOG=str(log),
        HELM_STANDIN_VCLUSTER_KUBECONFIG=str(vcluster_kubeconfig))

    first = WorkerProcess.start({**env, "HELM_STANDIN_HANG": str(hanging)}, tmp_path / "w1.log")
    workers.append(first)
    wait_for(hanging.exists, "the first worker to run helm", timeout=60)
    claimed = lease(own_pg_database, cluster_id)
    assert first.holds(claimed.lease_owner)
    assert claimed.lease_expires_at is not None

    second = WorkerProcess.start(env, tmp_path / "w2.log")
    workers.append(second)
    time.sleep(3 * LEASE)  # helm hangs for three leases: the heartbeat keeps the cluster
    kept = lease(own_pg_database, cluster_id)
    assert kept.lease_owner == claimed.lease_owner
    assert kept.lease_expires_at is not None and kept.lease_expires_at > claimed.lease_expires_at
    assert upgrades(log) == 1

    first.kill()

    def adopted() -> bool:
        cluster = row(own_pg_database, cluster_id)
        return second.holds(lease(own_pg_database, cluster_id).lease_owner) or cond.is_true(
            cluster.conditions, cond.READY)

    wait_for(adopted, "the second worker to adopt the cluster", timeout=ADOPTION_BOUND)
    wait_for(lambda: cond.is_true(row(own_pg_database, cluster_id).conditions, cond.READY),
             "the adopted cluster to turn Ready", timeout=60)
    assert upgrades(log) == 2
