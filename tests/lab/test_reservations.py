"""The lab's play of KAI's reservation pods: which device each one reports, and when none (pure;
no lab started)."""

from __future__ import annotations

from typing import Any

from app.lab.gpu import mig_node
from app.lab.reservations import GPU_INDEX, RESERVATION_NAMESPACE, devices_to_report
from app.lab.reservations import whole_gpus_by_node as whole


def reservation(name: str, node: str, device: str | None = None, created: str = "",
                **status: Any) -> dict[str, Any]:
    annotations = {GPU_INDEX: device} if device else {}
    return {"metadata": {"name": name, "namespace": RESERVATION_NAMESPACE,
                         "annotations": annotations, "creationTimestamp": created},
            "spec": {"nodeName": node}, "status": status}


def gpu_pod(node: str, gpus: str, namespace: str = "t-acme--train") -> dict[str, Any]:
    return {"metadata": {"name": "job", "namespace": namespace},
            "spec": {"nodeName": node, "containers": [
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
            "status": {"phase": "Running"}}


def test_each_new_reservation_reports_the_lowest_gpu_no_other_holds() -> None:
    pods = [reservation("r-held", "h100-a", "GPU-h100-a-0"),
            reservation("r-new", "h100-a", created="2026-12-07T06:00:01Z"),
            reservation("r-later", "h100-a", created="2026-12-07T06:00:02Z"),
            reservation("r-other", "h100-b")]
    assert devices_to_report(pods, {"h100-a": 4, "h100-b": 4}, {}) == {
        "r-new": "GPU-h100-a-1", "r-later": "GPU-h100-a-2", "r-other": "GPU-h100-b-0"}


def test_a_node_whose_gpus_are_all_held_gives_no_device() -> None:
    pods = [reservation("r-held", "h100-a", "GPU-h100-a-0"), reservation("r-new", "h100-a")]
    held = whole([gpu_pod("h100-a", "1"), gpu_pod("h100-b", "2"),
                  gpu_pod("h100-a", "1", namespace=RESERVATION_NAMESPACE)])
    assert held == {"h100-a": 1, "h100-b": 2}
    assert devices_to_report(pods, {"h100-a": 2}, held) == {}
    assert devices_to_report(pods, {"h100-a": 3}, held) == {"r-new": "GPU-h100-a-1"}


def test_a_reservation_going_away_is_not_answered_and_frees_its_gpu() -> None:
    gone = reservation("r-gone", "h100-a", "GPU-h100-a-0")
    gone["metadata"]["deletionTimestamp"] = "2026-12-07T06:00:00Z"
    pods = [gone, reservation("r-done", "h100-a", phase="Succeeded"),
            reservation("r-new", "h100-a")]
    assert devices_to_report(pods, {"h100-a": 1}, {}) == {"r-new": "GPU-h100-a-0"}


def test_a_mig_node_has_no_whole_gpu_and_its_slices_as_gfd_and_the_device_plugin_say() -> None:
    node = mig_node("a100-mig-a", {"1g.10gb": 7})
    assert node["status"]["allocatable"] == {
        "nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "7", "cpu": "96", "memory": "1Ti",
        "pods": "110"}
    labels = node["metadata"]["labels"]
    assert (labels["nvidia.com/mig.strategy"], labels["nvidia.com/gpu.product"],
            labels["nvidia.com/gpu.count"], labels["nvidia.com/mig-1g.10gb.count"],
            labels["nvidia.com/mig-1g.10gb.memory"]) == (
        "mixed", "NVIDIA-A100-SXM4-80GB", "1", "7", "9728")
