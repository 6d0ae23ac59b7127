"""Real KAI Scheduler on clusters of less than a GPU: shares of one GPU bound by KAI's binder
(the lab's reservation player reporting the device, as KAI's reservation image would) and MIG
slices bound on a MIG node in the mixed strategy, each within the cluster's queue.

A host of its own (tests/support/kai.py) with KAI's five programs, kwok keeping an H100 node of
2 GPUs and an A100 in MIG mode (7 x 1g.10gb) Ready. The host objects are the portal's own for a
cluster of 0.5 of an H100 and one of 3 x 1g.10gb (namespace, quota, queues); pods arrive as
vCluster's syncer writes them, after the portal's admission webhook (its patch applied here).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.kube.adapter import KubernetesAdapter
from app.kube.manifests import ClusterSpec, TenantSpec, cluster_host_objects, platform_objects
from app.kube.manifests import labels as lbl
from app.kube.manifests.specs import GpuGrant
from app.kube.manifests.units import GpuUnit
from app.kube.port import Manifest
from app.lab.reservations import GPU_GROUP, GPU_INDEX, RESERVATION_APP, RESERVATION_NAMESPACE
from app.webhook.mutation import review_pod
from tests.kube.test_real_server import POLICY, remove
from tests.support import kai
from tests.support.json_patch import patched
from tests.support.kai import GpuScheduling, mig_node
from tests.support.kai import gpu_host as kai_host
from tests.support.kubectl import Kubectl, KubectlError
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.kube_server, kai.ONE_WORKER]

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
SHARE_NODE, MIG_NODE = "h100-a", "a100-mig-a"
# Binding a share waits on the reservation pod's report: a bind, or one retry after a
# lost one, within KAI's 40 s timeout.
BOUND_WITHIN = 120.0
RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
              "runAsNonRoot": True, "runAsUser": 1000,
              "seccompProfile": {"type": "RuntimeDefault"}}


@pytest.fixture(scope="module")
def gpu_host(kube_assets_dir: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[GpuScheduling]:
    with kai_host(kube_assets_dir, tmp_path_factory.mktemp("sharing-host"), "sharing-host",
                  H100, {SHARE_NODE: 2}, [mig_node(MIG_NODE, {"1g.10gb": 7})]) as scheduling:
        yield scheduling


@pytest.fixture
def host(gpu_host: GpuScheduling) -> Iterator[KubernetesAdapter]:
    adapter = gpu_host.server.adapter()
    yield adapter
    adapter.close()


def cluster_objects(slug: str, unit: GpuUnit, profile: str, amount: int) -> list[Manifest]:
    """The portal's host objects for cluster ``notebooks`` of ``amount`` in ``unit``."""
    gpu_class = A100 if unit == "mig" else H100
    tenant = TenantSpec(slug, "Tailspin", {}, 16000, 64000,
                        gpu_grants=(GpuGrant(gpu_class, unit, profile, amount),))
    cluster = ClusterSpec(
        tenant=slug, name="notebooks", kubernetes_version="1.32.4", placement="shared-pool",
        gpu_class=gpu_class, gpus=0, cpu_millicores=4000, memory_mib=8192,
        endpoint=f"https://notebooks.{slug}.vc.example.com", gpu_unit=unit,
        mig_profile=profile, amount=amount)
    return [*platform_objects(POLICY), *cluster_host_objects(cluster, tenant, POLICY)]


def as_admitted(pod: Manifest, namespace: Manifest) -> Manifest:
    """The pod as the API server gets it after the portal's webhook patched it."""
    answer = review_pod({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                         "request": {"uid": secrets.token_hex(8), "operation": "CREATE",
                                     "namespace": namespace["metadata"]["name"],
                                     "object": pod}}, namespace["metadata"]["labels"])
    response = answer["response"]
    return patched(pod, response)


def synced_pod(name: str, namespace: str, annotations: dict[str, str],
               limits: dict[str, str]) -> Manifest:
    container = {"name": "main", "image": "example.com/notebook:1",
                 "securityContext": RESTRICTED, "resources": {"limits": limits}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": namespace, "annotations": annotations,
        "labels": {lbl.VCLUSTER_SYNCED_MARKER: "notebooks"}},
        "spec": {"containers": [container]}}


def pods(host: KubernetesAdapter, namespace: str) -> dict[str, Manifest]:
    return {p["metadata"]["name"]: p for p in host.list("v1", "Pod", namespace)
            if p["metadata"]["name"].startswith("nb-")}


def running(host: KubernetesAdapter, namespace: str) -> list[str]:
    return sorted(name for name, p in pods(host, namespace).items()
                  if p["spec"].get("nodeName") and p["status"].get("phase") == "Running")


def kai_reason(pod: Manifest | None) -> str:
    """What KAI's scheduler wrote into the pod's PodScheduled condition ("" until it has)."""
    for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or "")
    return ""


def wait_for_running(gpu_host: GpuScheduling, host: KubernetesAdapter, namespace: str,
                     name: str) -> None:
    wait_for(lambda: name in running(host, namespace),
             lambda: f"KAI's binder to bind {name}: {pods(host, namespace)}; "
                     f"exited: {gpu_host.exited()}\n{gpu_host.log('binder')}",
             timeout=BOUND_WITHIN)


def test_two_quarter_pods_share_one_gpu_bound_by_kais_binder_and_a_third_waits_over_limit(
        gpu_host: GpuScheduling, host: KubernetesAdapter, tmp_path: Path) -> None:
    slug = f"share-{secrets.token_hex(3)}"
    built = cluster_objects(slug, "share", "", 50)
    namespace_object = built[len(platform_objects(POLICY))]
    namespace = namespace_object["metadata"]["name"]
    for obj in built:
        host.apply(obj, force=True)
    syncer = Kubectl(gpu_host.server, tmp_path / "syncer", manager="vcluster")
    try:
        # One after the other: KAI v0.12.0's binder, binding two shares of a new GPU group at
        # once, may not see the first one's label yet and delete the group's reservation pod
        # (kai-scheduler/KAI-Scheduler#1103, fixed in later releases).
        for name in ("nb-0", "nb-1"):
            syncer.create(as_admitted(synced_pod(
                name, namespace, {lbl.GPU_FRACTION: "0.25"}, {}), namespace_object))
            wait_for_running(gpu_host, host, namespace, name)
        assert running(host, namespace) == ["nb-0", "nb-1"]
        bound = pods(host, namespace)
        # one GPU of one node: one GPU group, one reservation pod that reported its device
        assert {p["spec"]["nodeName"] for p in bound.values()} == {SHARE_NODE}
        groups = {p["metadata"]["labels"].get(GPU_GROUP) for p in bound.values()}
        assert len(groups) == 1 and None not in groups
        reservations = host.list("v1", "Pod", RESERVATION_NAMESPACE,
                                 label_selector=RESERVATION_APP)
        assert [(r["spec"]["nodeName"], r["metadata"]["labels"][GPU_GROUP])
                for r in reservations] == [(SHARE_NODE, *groups)]
        device = reservations[0]["metadata"]["annotations"][GPU_INDEX]
        assert device.startswith(f"GPU-{SHARE_NODE}-")
        for pod in bound.values():
            assert pod["metadata"]["annotations"]["received-resource-type"] == "Fraction"
            # the binder's ConfigMap for the pod: the device and the portion it got
            prefix = pod["metadata"]["annotations"][lbl.SHARED_GPU_CONFIGMAP]
            configmap = host.get("v1", "ConfigMap", f"{prefix}-0", namespace) or {}
            data = configmap.get("data") or {}
            assert (data.get("NVIDIA_VISIBLE_DEVICES"), data.get("GPU_PORTION")) == (
                device, "0.25"), configmap

        # A third quarter fits the GPU but not the cluster's 0.5: KAI's own reason.
        syncer.create(as_admitted(synced_pod(
            "nb-2", namespace, {lbl.GPU_FRACTION: "0.25"}, {}), namespace_object))
        reason = wait_for(lambda: kai_reason(pods(host, namespace).get("nb-2")),
                          lambda: f"KAI's reason on nb-2: {pods(host, namespace).get('nb-2')}",
                          timeout=BOUND_WITHIN)
        assert "Limit is 0.5 GPUs" in reason, reason
        assert not pods(host, namespace)["nb-2"]["spec"].get("nodeName")
    finally:
        syncer.close()
        remove(host, built)
    # once no pod of its group is left, the binder lets the reservation go
    wait_for(lambda: not host.list("v1", "Pod", RESERVATION_NAMESPACE,
                                   label_selector=RESERVATION_APP) or None,
             lambda: "the reservation pod to go with its pods", timeout=BOUND_WITHIN)


def test_three_slices_are_bound_on_the_mig_node_and_a_fourth_is_refused_by_the_quota(
        gpu_host: GpuScheduling, host: KubernetesAdapter, tmp_path: Path) -> None:
    slug = f"mig-{secrets.token_hex(3)}"
    built = cluster_objects(slug, "mig", "1g.10gb", 3)
    namespace_object = built[len(platform_objects(POLICY))]
    namespace = namespace_object["metadata"]["name"]
    for obj in built:
        host.apply(obj, force=True)
    slice_ask = {"nvidia.com/mig-1g.10gb": "1"}
    syncer = Kubectl(gpu_host.server, tmp_path / "syncer", manager="vcluster")
    try:
        for index in range(3):
            syncer.create(as_admitted(synced_pod(f"nb-{index}", namespace, {}, slice_ask),
                                      namespace_object))
        wait_for(lambda: running(host, namespace) == ["nb-0", "nb-1", "nb-2"],
                 lambda: f"KAI to bind three slices: {pods(host, namespace)}; "
                         f"exited: {gpu_host.exited()}\n{gpu_host.log('scheduler')}",
                 timeout=BOUND_WITHIN)
        assert {p["spec"]["nodeName"] for p in pods(host, namespace).values()} == {MIG_NODE}
        # no reservation for a slice: MIG binds like any extended resource
        assert not [r for r in host.list("v1", "Pod", RESERVATION_NAMESPACE)
                    if r["spec"].get("nodeName") == MIG_NODE]
        with pytest.raises(KubectlError) as refused:
            syncer.create(as_admitted(synced_pod("nb-3", namespace, {}, slice_ask),
                                      namespace_object))
        assert refused.value.status == 403, refused.value
        assert "exceeded quota" in refused.value.message
        assert "requests.nvidia.com/mig-1g.10gb" in refused.value.message
    finally:
        syncer.close()
        remove(host, built)
