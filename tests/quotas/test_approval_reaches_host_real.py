"""An approved quota reaches the host's KAI queue within seconds, not at the next resync.

On the real host API server (with KAI's Queue CRD) a worker runs the cluster kind on the
runtime in a thread, with the default resync (300 s), on a database of its own (separately
committed, as in production). Once the tenant's shared-pool cluster is Ready and the worker
idles, a platform admin approves more quota through the service: the approval enqueues the
tenant's clusters in its transaction, and the tenant queue's GPU quota on the host follows. The
time from the approval's commit to the new quota on the host is measured and printed.
"""

from __future__ import annotations

import base64
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.auth.principal import Principal
from app.clusters import conditions as cond
from app.clusters import service as clusters
from app.clusters.models import VirtualCluster
from app.clusters.schemas import ClusterCreate
from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.manifests import labels as lbl
from app.quotas import service as quotas
from app.quotas.schemas import ApproveIn, QuotaRequestCreate
from app.reconcilers.clusters import ClusterReconciler
from app.reconcilers.runtime import Runtime
from app.workqueue import CLUSTERS
from app.workqueue import repository as queue
from tests import factories
from tests.support.drive import beside
from tests.support.installers import FakeInstaller
from tests.support.kube_server import ApiServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kube_server

KAI = lbl.KAI_API_VERSION
H100 = "NVIDIA-H100-80GB-HBM3"
# Far below the resync (300 s): only the enqueue can explain a change this soon.
BOUND_SECONDS = 15.0


def standin_helm(host: KubernetesAdapter, kubeconfig: str) -> FakeInstaller:
    """Plays helm: an install leaves Secret vc-<release> with the virtual cluster's admin
    kubeconfig (a second real API server's), as the vCluster chart does."""

    def bring_up(release: str, namespace: str) -> None:
        host.apply({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": f"vc-{release}", "namespace": namespace},
            "data": {"config": base64.b64encode(kubeconfig.encode()).decode()}})

    def take_down(release: str, namespace: str) -> None:
        host.delete("v1", "Secret", f"vc-{release}", namespace)

    return FakeInstaller(brings_up=bring_up, takes_down=take_down)


@dataclass
class World:
    slug: str
    tenant_admin: Principal
    platform_admin: Principal
    gpu_class_id: int


@pytest.fixture
def host(kai_host: ApiServer) -> Iterator[KubernetesAdapter]:
    admin = kai_host.adapter()
    yield admin
    admin.close()


@pytest.fixture
def world(own_pg_database: Database, host: KubernetesAdapter) -> Iterator[World]:
    """A tenant of its own (the servers are shared by the run) with 4 approved H100s, and 16
    shared H100s in the inventory of the environment's host."""
    slug = f"aq-{secrets.token_hex(3)}"
    with own_pg_database.transaction() as db:
        tenant = factories.tenant(db, slug, display_name=f"Approval {slug}")
        admin, operator = factories.user(db), factories.user(db, admin=True)
        factories.membership(db, tenant, admin, "admin")
        h100 = factories.gpu_class(db, H100, display_name="H100 80GB")
        factories.quota(db, tenant, h100, 4)
        factories.node(db, factories.env_host(db), h100, gpu_count=16)
        found = World(slug, Principal(user=admin, via="token", roles={tenant.id: "admin"}),
                      Principal(user=operator, via="token", roles={}), h100.id)
    yield found
    remove_tenant_objects(host, slug)


def remove_tenant_objects(host: KubernetesAdapter, slug: str) -> None:
    """The tenant's namespaces and KAI queues the run left on the shared host server."""
    selector = {lbl.TENANT: slug}
    for namespace in host.list("v1", "Namespace", label_selector=selector):
        host.delete("v1", "Namespace", namespace["metadata"]["name"])
    for kai_queue in host.list(KAI, "Queue", label_selector=selector):
        host.delete(KAI, "Queue", kai_queue["metadata"]["name"])


@dataclass
class Worker:
    runtime: Runtime
    settings: Settings


@pytest.fixture
def worker(own_pg_database: Database, kai_host: ApiServer, virtual_api: ApiServer,
           host: KubernetesAdapter, tmp_path: Path) -> Iterator[Worker]:
    """The cluster kind on the runtime, in a thread, with the default resync and poll."""
    kubeconfig = kai_host.write_admin_kubeconfig(tmp_path / "host.kubeconfig")
    settings = Settings(env="test", database_url=own_pg_database.url,
                        kubeconfig=str(kubeconfig))
    assert settings.worker_resync_seconds == 300
    kind = ClusterReconciler(settings, own_pg_database, ClientConnector(settings),
                             standin_helm(host, virtual_api.admin_kubeconfig), wait_seconds=0.5)
    runtime = Runtime(own_pg_database, [*beside(kind), kind],
                      lease_seconds=settings.worker_lease_seconds,
                      concurrency=settings.worker_concurrency,
                      poll_seconds=settings.worker_poll_seconds)
    thread = threading.Thread(target=runtime.run, name="worker", daemon=True)
    thread.start()
    yield Worker(runtime, settings)
    runtime.stop()
    thread.join(timeout=60)
    assert not thread.is_alive()


def gpu_quota(host: KubernetesAdapter, slug: str) -> int | None:
    found: dict[str, Any] | None = host.get(KAI, "Queue", slug)
    return None if found is None else int(found["spec"]["resources"]["gpu"]["quota"])


def test_an_approval_reaches_the_tenant_queue_on_the_host_within_seconds(
    own_pg_database: Database, world: World, worker: Worker, host: KubernetesAdapter,
) -> None:
    database, settings = own_pg_database, worker.settings
    with database.transaction() as db:
        cluster_id = clusters.create_cluster(db, world.tenant_admin, settings, world.slug,
                                             ClusterCreate(
                                                 name="train", placement="shared-pool",
                                                 gpu_class_id=world.gpu_class_id, gpus=2,
                                                 cpu_millicores=4000, memory_mib=8192)).id

    def ready() -> bool | None:
        with database.session() as db:
            cluster = db.get(VirtualCluster, cluster_id)
            assert cluster is not None
            done = (cond.is_true(cluster.conditions or [], cond.READY)
                    and cluster.observed_generation == cluster.generation)
            return True if done else None

    wait_for(ready, "the cluster to be Ready")
    assert gpu_quota(host, world.slug) == 4
    # Converged: the worker idles, and would look at the cluster again in about 300 s. The
    # reconcile that wrote Ready gives its lease back just after that commit.
    def idle() -> bool:
        with database.session() as db:
            [item] = [i for i in queue.items(db, CLUSTERS) if i.key == str(cluster_id)]
            return item.lease_owner is None and item.due_at > utcnow() + timedelta(seconds=200)

    wait_for(idle, "the worker to give the converged cluster back, due in about 300 s",
             timeout=15)

    with database.transaction() as db:
        request = quotas.create_request(
            db, world.tenant_admin, worker.settings, world.slug, QuotaRequestCreate(
                gpu_class_id=world.gpu_class_id, gpus=4, reason="a training run"))
    with database.transaction() as db:
        quotas.approve(db, world.platform_admin, request.id, ApproveIn())
    approved = time.monotonic()
    wait_for(lambda: gpu_quota(host, world.slug) == 8, "the tenant queue's GPU quota of 8",
             timeout=BOUND_SECONDS + 15)
    elapsed = time.monotonic() - approved
    print(f"\napproval -> tenant queue gpu quota on the host: {elapsed:.2f} s "
          f"(poll {settings.worker_poll_seconds:g} s, resync "
          f"{settings.worker_resync_seconds:g} s)")
    assert elapsed < BOUND_SECONDS
    with database.session() as db:
        cluster = db.scalar(select(VirtualCluster).where(VirtualCluster.id == cluster_id))
        assert cluster is not None and cluster.observed_generation == cluster.generation
