"""Real KAI Scheduler binding MIG slices: what its queue status says of them, as the usage
sampler reads it.

A host of its own with KAI's CRDs, its five programs and kwok keeping one A100 node in MIG's
mixed strategy Ready (seven 1g.10gb slices, no whole GPU). A leaf queue guaranteed 3 GPUs in
KAI's count (a 1g.10gb slice weighs 1) and limited to them: three one-slice pods are bound, a
fourth waits; the queue's status counts the slices under their own resource name, which
``queue_use`` reads as slices of the profile, and no whole GPU.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.kube.adapter import KubernetesAdapter
from app.kube.manifests import labels as lbl
from app.kube.port import Manifest
from app.kube.quantities import parse_quantity
from app.kube.usage import KAI_PENDING, queue_use, waiting_pods
from app.lab.gpu import gpu_node
from tests.support import kai
from tests.support.kai import SCHEDULER_NAME, GpuScheduling
from tests.support.kai import gpu_host as kai_host
from tests.support.waiting import wait_for
from tests.usage.test_kai_real import kai_queue

pytestmark = [pytest.mark.kube_server, kai.ONE_WORKER]

A100 = "NVIDIA-A100-SXM4-80GB"
SLICE = "nvidia.com/mig-1g.10gb"
SCHEDULED_WITHIN = 90.0


def mig_node(name: str, slices: int) -> Manifest:
    """A100 in MIG's mixed strategy as GPU Feature Discovery and the device plugin show it."""
    node = gpu_node(name, A100, 0, **{"nvidia.com/mig.capable": "true",
                                      "nvidia.com/mig.strategy": "mixed",
                                      "nvidia.com/gpu.count": "1"})
    for resources in (node["status"]["capacity"], node["status"]["allocatable"]):
        resources[SLICE] = str(slices)
    return node


@pytest.fixture(scope="module")
def mig_host(kube_assets_dir: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[GpuScheduling]:
    with kai_host(kube_assets_dir, tmp_path_factory.mktemp("mig-host"), "mig-host", A100,
                  {}) as scheduling:
        admin = scheduling.server.adapter()
        try:
            admin.apply(mig_node("a100-mig", 7), force=True)
        finally:
            admin.close()
        yield scheduling


def slice_pod(name: str, namespace: str, queue: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": namespace, "labels": {lbl.KAI_QUEUE_LABEL: queue}},
        "spec": {"schedulerName": SCHEDULER_NAME,
                 "containers": [{"name": "notebook", "image": "example.com/nb:1",
                                 "resources": {"limits": {SLICE: "1"}}}]}}


def _placed(host: KubernetesAdapter, namespace: str) -> dict[str, tuple[str | None, str]]:
    return {p["metadata"]["name"]: (p["spec"].get("nodeName"), p["status"].get("phase", ""))
            for p in host.list("v1", "Pod", namespace)}


def _allocated(host: KubernetesAdapter, queue: str) -> dict[str, Any] | None:
    found = host.get(lbl.KAI_API_VERSION, "Queue", queue) or {}
    allocated = (found.get("status") or {}).get("allocated") or {}
    return allocated if allocated.get(SLICE) == "3" else None


def test_kais_queue_status_counts_bound_slices_as_slices_of_their_profile(
        mig_host: GpuScheduling) -> None:
    host = mig_host.server.adapter()
    tenant = f"mig-{secrets.token_hex(3)}"
    namespace, queue = f"t-{tenant}--notes", f"{tenant}--notes"
    try:
        host.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        host.apply(kai_queue(tenant, None, gpus=3), force=True)
        leaf = kai_queue(queue, tenant, gpus=3)
        leaf["metadata"]["labels"] = lbl.cluster_labels(tenant, "notes")
        host.apply(leaf, force=True)
        for index in range(4):
            host.apply(slice_pod(f"nb-{index}", namespace, queue), force=True)
        wait_for(lambda: sorted(phase for node, phase in _placed(host, namespace).values()
                                if node) == ["Running"] * 3,
                 lambda: f"KAI to bind three slice pods: {_placed(host, namespace)}; exited: "
                         f"{mig_host.exited()}\n{mig_host.log('scheduler')[-3000:]}",
                 timeout=SCHEDULED_WITHIN)
        status = wait_for(lambda: _allocated(host, queue),
                          lambda: f"3 slices in queue {queue}'s status: "
                                  f"{host.get(lbl.KAI_API_VERSION, 'Queue', queue)}",
                          timeout=SCHEDULED_WITHIN)
        # KAI's own account: the slices under their resource, no whole GPU among them
        assert parse_quantity(status.get(lbl.GPU_RESOURCE, "0")) == 0
        found = queue_use(host.get(lbl.KAI_API_VERSION, "Queue", queue) or {})
        assert found is not None
        assert found.allocated_slices == {"1g.10gb": 3.0}
        assert found.allocated_gpus == 0.0
        assert found.in_unit("mig", "1g.10gb")[:2] == (3.0, 4.0)  # the fourth asks too
        pending = host.list("v1", "Pod", namespace, field_selector=KAI_PENDING)
        assert [(w.namespace, w.pods) for w in waiting_pods(pending)] == [(namespace, 1)]
    finally:
        host.delete("v1", "Namespace", namespace)
        for name in (queue, tenant):
            host.delete(lbl.KAI_API_VERSION, "Queue", name)
        host.close()
