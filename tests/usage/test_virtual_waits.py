"""Pods that wait inside a virtual cluster: the host quota refused them, so the host never saw
them; the portal still says how many wait and why, in the syncer's words."""

from __future__ import annotations

from typing import Any

from app.kube.memory import InMemoryKube
from app.kube.usage import HostUsage, WaitingPods, read_virtual_waits
from app.usage.samples import Owner
from app.usage.sampling import gpu_waits

QUOTA_REFUSAL = ('Error syncing to host cluster: create object: pods "eval-x-default-x-train" '
                 "is forbidden: exceeded quota: vc-train, requested: requests.nvidia.com/gpu=1")
KAI_REASON = "MaxNodePoolResources: the pod requires GPU: 16"


def pod(name: str, gpus: int, node: str = "") -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": resources}]},
            "status": {"phase": "Pending"}}


def sync_error(name: str, pod_name: str, message: str, at: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": pod_name},
            "reason": "SyncError", "type": "Warning", "message": message, "lastTimestamp": at}


def test_gpu_pods_the_host_refused_are_counted_with_the_syncers_latest_reason() -> None:
    virtual = InMemoryKube()
    for obj in (pod("eval", 1), pod("cpu-only", 0), pod("bound", 1, node="h100-1"),
                sync_error("e1", "eval", "an older error", "2026-12-02T00:00:00Z"),
                sync_error("e2", "eval", QUOTA_REFUSAL, "2026-12-02T00:05:00Z")):
        virtual.seed(obj)
    assert read_virtual_waits(virtual) == WaitingPods("", 1, QUOTA_REFUSAL)


def test_nothing_waits_without_a_pending_gpu_pod() -> None:
    virtual = InMemoryKube()
    virtual.seed(pod("cpu-only", 0))
    assert read_virtual_waits(virtual) == WaitingPods("", 0, "")


def test_kais_reason_comes_first_and_the_virtual_cluster_counts_every_waiting_pod() -> None:
    clusters = {("acme", "train"): Owner(1, 10, 1), ("acme", "eval"): Owner(2, 10, 1),
                ("acme", "idle"): Owner(3, 10, 1)}
    held = HostUsage(waiting=[WaitingPods("t-acme--train", 1, KAI_REASON)])
    refused = {("acme", "train"): WaitingPods("", 3, QUOTA_REFUSAL),
               ("acme", "eval"): WaitingPods("", 2, QUOTA_REFUSAL)}
    assert gpu_waits(held, clusters, refused) == {
        1: (3, KAI_REASON), 2: (2, QUOTA_REFUSAL), 3: (0, "")}
