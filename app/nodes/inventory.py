"""What the inventory keeps of a host Node: read from its labels and status, no I/O.

GPU Feature Discovery labels a GPU node with ``nvidia.com/gpu.product``, ``.memory`` (MiB)
and ``.count``; the device plugin publishes allocatable ``nvidia.com/gpu``. In MIG mixed mode
the GPUs appear as ``nvidia.com/mig-<profile>`` resources instead and ``nvidia.com/gpu`` is 0:
those slices are recorded, never counted as whole GPUs. Nodes with none of this are CPU-only
and not part of the GPU inventory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.kube.manifests import labels as lbl

GPU_MEMORY = "nvidia.com/gpu.memory"
GPU_COUNT = "nvidia.com/gpu.count"
GPU_CLIQUE = "nvidia.com/gpu.clique"
MIG_STRATEGY = "nvidia.com/mig.strategy"
MIG_PREFIX = "nvidia.com/mig-"
ZONE = "topology.kubernetes.io/zone"


@dataclass(frozen=True)
class NodeFacts:
    name: str
    product: str
    gpus: int
    physical_gpus: int
    memory_mib: int
    mig_strategy: str
    mig_resources: dict[str, int]
    zone: str
    rack: str
    clique: str
    ready: bool
    taints: list[dict[str, Any]]
    labels: dict[str, str] = field(default_factory=dict)


def read_node(manifest: dict[str, Any], rack_label: str) -> NodeFacts | None:
    """The GPU facts of a Node object, or None for a CPU-only node."""
    metadata = manifest.get("metadata") or {}
    labels: dict[str, str] = dict(metadata.get("labels") or {})
    status = manifest.get("status") or {}
    allocatable = status.get("allocatable") or {}
    product = labels.get(lbl.GPU_PRODUCT, "")
    gpus = _count(allocatable.get(lbl.GPU_RESOURCE))
    mig = {key: _count(value) for key, value in sorted(allocatable.items())
           if key.startswith(MIG_PREFIX) and _count(value) > 0}
    if not product and gpus == 0 and not mig:
        return None
    return NodeFacts(
        name=str(metadata.get("name", "")), product=product, gpus=gpus,
        physical_gpus=_count(labels.get(GPU_COUNT)) or gpus,
        memory_mib=_count(labels.get(GPU_MEMORY)),
        mig_strategy=labels.get(MIG_STRATEGY, "mixed" if mig else "none"),
        mig_resources=mig, zone=labels.get(ZONE, ""), rack=labels.get(rack_label, ""),
        clique=labels.get(GPU_CLIQUE, ""), ready=_is_ready(status),
        taints=[dict(taint) for taint in (manifest.get("spec") or {}).get("taints") or []],
        labels=labels,
    )


def display_name(product: str) -> str:
    """``NVIDIA-H100-80GB-HBM3`` reads as ``H100 80GB HBM3``."""
    return product.removeprefix("NVIDIA-").replace("-", " ") or product


def _is_ready(status: dict[str, Any]) -> bool:
    conditions = status.get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _count(value: Any) -> int:
    """Whole-number quantities as the API writes them ("8"); anything else counts as 0."""
    try:
        return max(int(str(value)), 0)
    except (TypeError, ValueError):
        return 0
