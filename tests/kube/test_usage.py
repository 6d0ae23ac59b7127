"""A leaf queue's use split into its guarantee and burst, from the Queue object alone."""

from __future__ import annotations

from typing import Any

import pytest

from app.kube.manifests import labels as lbl
from app.kube.usage import QueueUse, burst_of, queue_use


def leaf_queue(allocated: str, quota: Any = None) -> dict[str, Any]:
    """acme/train's leaf queue; ``quota`` left out of the spec when None."""
    gpu = {"limit": -1} if quota is None else {"quota": quota, "limit": -1}
    return {"apiVersion": lbl.KAI_API_VERSION, "kind": "Queue",
            "metadata": {"name": "acme--train", "labels": lbl.cluster_labels("acme", "train")},
            "spec": {"resources": {"gpu": gpu}},
            "status": {"allocated": {lbl.GPU_RESOURCE: allocated}}}


def _read(queue: dict[str, Any]) -> QueueUse:
    found = queue_use(queue)
    assert found is not None
    return found


@pytest.mark.parametrize(("allocated", "quota", "guaranteed", "burst"), [
    ("6", 4, 4.0, 2.0),  # KAI lent 2 idle GPUs beyond the guarantee
    ("3", 4, 3.0, 0.0),  # within the guarantee
    ("4", 4, 4.0, 0.0),
    ("4500m", "4", 4.0, 0.5),  # a quantity in the spec, a fraction in the status
    ("0", 2, 0.0, 0.0),
])
def test_burst_is_the_allocation_beyond_the_queues_own_quota(
        allocated: str, quota: Any, guaranteed: float, burst: float) -> None:
    found = _read(leaf_queue(allocated, quota))
    assert (found.guaranteed_gpus, found.burst_gpus) == (guaranteed, burst)
    assert found.guaranteed_gpus + found.burst_gpus == found.allocated_gpus


@pytest.mark.parametrize("quota", [None, -1, "-1", "not a number"])
def test_no_known_guarantee_counts_the_whole_allocation_as_guaranteed(quota: Any) -> None:
    found = _read(leaf_queue("5", quota))
    assert found.quota_gpus is None
    assert (found.guaranteed_gpus, found.burst_gpus) == (5.0, 0.0)


def test_a_queue_without_a_spec_has_no_known_guarantee() -> None:
    queue = leaf_queue("2", 1)
    del queue["spec"]
    assert _read(queue).quota_gpus is None


def test_the_one_definition() -> None:
    assert burst_of(7.0, 4.0) == 3.0
    assert burst_of(3.0, 4.0) == 0.0
    assert burst_of(7.0, None) == 0.0
    assert QueueUse("acme", "train", 7.0, 7.0).burst_gpus == 0.0  # read without a quota
