"""Real KAI Scheduler on the queues the portal makes: GPU pods bound within the cluster's grant,
and "in use" read from what KAI allocated.

A host of its own (etcd + kube-apiserver + controller-manager) with KAI's CRDs, its five programs
and kwok keeping two H100 nodes Ready (tests/support/kai.py). The portal's worker makes the
cluster's namespace, quota and KAI queues there; pods arrive in the host namespace as vCluster's
syncer writes them, with the scheduler and leaf queue the portal's admission webhook gives them.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.clusters import service
from app.clusters.schemas import ClusterCreate
from app.database.core import Database
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.manifests import labels as lbl
from app.kube.port import Manifest
from app.reconcilers.usage import UsageSampler
from app.usage import service as usage_service
from tests import factories
from tests.clusters.standin_helm import use_standin_helm
from tests.clusters.support import cluster_settings
from tests.support import kai
from tests.support.drive import run_due
from tests.support.kai import SCHEDULER_NAME, GpuScheduling
from tests.support.kai import gpu_host as kai_host
from tests.support.kube_server import ApiServer
from tests.support.kubectl import Kubectl, KubectlError
from tests.support.waiting import wait_for
from tests.usage.support import reconcile_until_ready

pytestmark = [pytest.mark.kube_server, kai.ONE_WORKER]

H100 = "NVIDIA-H100-80GB-HBM3"
GRANTED = 4  # the cluster's GPUs: its leaf queue's quota and limit
SCHEDULED_WITHIN = 60.0


@pytest.fixture(scope="module")
def gpu_host(kube_assets_dir: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[GpuScheduling]:
    """A host whose GPU pods are scheduled for real: KAI and kwok, two 8-GPU H100 nodes."""
    with kai_host(kube_assets_dir, tmp_path_factory.mktemp("gpu-host"), "gpu-host", H100,
                  {"h100-a": 8, "h100-b": 8}) as scheduling:
        yield scheduling


def synced_pod(name: str, namespace: str, queue: str, gpus: int) -> Manifest:
    """A pod as vCluster's syncer writes it to the host, after the portal's webhook: KAI's
    scheduler and the leaf queue; Pod Security "restricted" as the namespace enforces."""
    context = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
               "runAsNonRoot": True, "runAsUser": 1000,
               "seccompProfile": {"type": "RuntimeDefault"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": namespace,
        "labels": {lbl.VCLUSTER_SYNCED_MARKER: "train", lbl.KAI_QUEUE_LABEL: queue}},
        "spec": {"schedulerName": SCHEDULER_NAME,
                 "nodeSelector": {lbl.GPU_PRODUCT: H100},
                 "containers": [{"name": "train", "image": "example.com/train:1",
                                 "securityContext": context,
                                 "resources": {"limits": {lbl.GPU_RESOURCE: str(gpus)}}}]}}


def placed(host: KubernetesAdapter, namespace: str) -> dict[str, tuple[str | None, str]]:
    """Each GPU pod's node and phase (the stand-in release's control-plane pod left out)."""
    return {p["metadata"]["name"]: (p["spec"].get("nodeName"), p["status"].get("phase", ""))
            for p in host.list("v1", "Pod", namespace)
            if p["metadata"]["name"].startswith("job-")}


def test_kai_binds_gpu_pods_within_the_clusters_queue_and_in_use_is_what_it_allocated(
        gpu_host: GpuScheduling, host: KubernetesAdapter, database: Database,
        virtual_api: ApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kubeconfig = gpu_host.server.write_admin_kubeconfig(tmp_path / "host.kubeconfig")
    settings = cluster_settings(kubeconfig=str(kubeconfig), worker_resync_seconds=0.0)
    use_standin_helm(tmp_path / "helm", monkeypatch, virtual_api.admin_kubeconfig)
    slug = f"kai-{secrets.token_hex(3)}"
    with database.transaction() as db:
        tenant, principal, h100 = factories.gpu_tenant(db, slug, gpus=8, product=H100)
        created = service.create_cluster(db, principal, settings, slug, ClusterCreate(
            name="train", placement="shared-pool", gpu_class_id=h100.id, gpus=GRANTED,
            cpu_millicores=16000, memory_mib=65536))
        tenant_id, h100_id = tenant.id, h100.id
    reconcile_until_ready(settings, database, created.id)

    # Two pods of two GPUs each fill the four GPUs granted; KAI binds both to the kwok nodes.
    namespace, queue = f"t-{slug}--train", f"{slug}--train"
    syncer = Kubectl(gpu_host.server, tmp_path / "syncer", manager="vcluster")
    for index in range(2):
        syncer.create(synced_pod(f"job-{index}", namespace, queue, gpus=2))
    wait_for(lambda: [phase for node, phase in placed(host, namespace).values()
                      if node] == ["Running", "Running"],
             lambda: f"KAI to run the pods: {placed(host, namespace)}; "
                     f"exited: {gpu_host.exited()}\n{gpu_host.log('scheduler')}",
             timeout=SCHEDULED_WITHIN)
    assert {node for node, _ in placed(host, namespace).values()} <= {"h100-a", "h100-b"}
    # A third is refused by the host namespace's quota: the syncer cannot place it at all.
    with pytest.raises(KubectlError) as refused:
        syncer.create(synced_pod("job-2", namespace, queue, gpus=2))
    assert refused.value.status == 403 and "exceeded quota: tenant-quota" in refused.value.message
    assert list(placed(host, namespace)) == ["job-0", "job-1"]

    # KAI's own account of the queue, and the portal's "in use" sampled from it.
    leaf = wait_for(lambda: allocated(host, queue),
                    lambda: f"an allocation in the status of queue {queue}: "
                            f"{host.get(lbl.KAI_API_VERSION, 'Queue', queue)}",
                    timeout=SCHEDULED_WITHIN)
    assert leaf == {lbl.GPU_RESOURCE: str(GRANTED)}  # the key the usage sampler reads
    sampler_settings = settings.model_copy(update={"worker_resync_seconds": 300.0})
    sampler = UsageSampler(sampler_settings, database, ClientConnector(sampler_settings))
    run_due(sampler, "worker-1")
    with database.session() as db:
        assert usage_service.gpus_in_use_by_class(db, tenant_id) == {h100_id: float(GRANTED)}


def allocated(host: KubernetesAdapter, queue: str) -> dict[str, str] | None:
    """The GPU entry of the queue's ``status.allocated`` (KAI's queue controller writes it)."""
    found = host.get(lbl.KAI_API_VERSION, "Queue", queue) or {}
    status = (found.get("status") or {}).get("allocated") or {}
    gpus = {k: v for k, v in status.items() if "gpu" in k}
    return gpus or None


def test_pods_created_while_kais_scheduler_is_down_are_bound_once_it_is_back(
        gpu_host: GpuScheduling, host: KubernetesAdapter, tmp_path: Path) -> None:
    namespace = f"down-{secrets.token_hex(3)}"
    parent, queue = namespace, f"{namespace}--leaf"  # KAI schedules jobs of leaf queues
    host.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for name, parent_queue in ((parent, None), (queue, parent)):
        host.apply(kai_queue(name, parent_queue, gpus=2), force=True)
    gpu_host.kill("scheduler")  # a crash: nothing flushed, no hand-over
    try:
        syncer = Kubectl(gpu_host.server, tmp_path / "syncer", manager="vcluster")
        syncer.create(synced_pod("job-0", namespace, queue, gpus=2))
        time.sleep(5)
        assert placed(host, namespace) == {"job-0": (None, "Pending")}
    finally:
        gpu_host.start_program("scheduler")
    wait_for(lambda: placed(host, namespace)["job-0"][1] == "Running",
             lambda: f"the pod to run after the restart: {placed(host, namespace)}",
             timeout=SCHEDULED_WITHIN)
    # bound once: one binding, and the scheduler's restart did not move it
    node = placed(host, namespace)["job-0"][0]
    time.sleep(3)
    assert placed(host, namespace)["job-0"] == (node, "Running")
    host.delete("v1", "Namespace", namespace)
    for name in (queue, parent):
        host.delete(lbl.KAI_API_VERSION, "Queue", name)


def kai_queue(name: str, parent: str | None, gpus: int) -> Manifest:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: Manifest = {"resources": {"gpu": {"quota": gpus, "limit": gpus, "overQuotaWeight": 1},
                                    "cpu": unlimited, "memory": unlimited}}
    if parent is not None:
        spec["parentQueue"] = parent
    return {"apiVersion": lbl.KAI_API_VERSION, "kind": "Queue", "metadata": {"name": name},
            "spec": spec}
