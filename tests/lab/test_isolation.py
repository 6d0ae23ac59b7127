"""What counts as a system pod that does not run (no lab needed)."""

from __future__ import annotations

from typing import Any

from app.lab.isolation import not_running


def pod(name: str, phase: str, ready: bool = True, **condition: str) -> dict[str, Any]:
    conditions = [{"type": "PodScheduled", "status": "False", **condition}] if condition else []
    return {"metadata": {"name": name},
            "status": {"phase": phase, "conditions": conditions,
                       "containerStatuses": [{"name": "c", "ready": ready}]}}


def test_a_pending_or_unready_pod_is_named_with_why() -> None:
    pending = pod("coredns-1", "Pending", ready=False,
                  message="Missing required configmaps: [coredns-custom]")
    found = not_running([pending, pod("up", "Running"), pod("starting", "Running", ready=False)])
    assert found == ["coredns-1: Pending (Missing required configmaps: [coredns-custom])",
                     "starting: Running (not ready)"]
    assert not_running([pod("up", "Running")]) == []
