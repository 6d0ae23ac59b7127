"""What the host reports about GPU use, read in three LISTs per pass whatever the fleet's size.

- each portal-made KAI queue's ``status`` (written by KAI's queue controller): GPUs allocated to
  running workloads and requested by running and pending ones;
- each portal-made ResourceQuota's ``status.used`` (written by the controller-manager's quota
  controller): GPUs requested by the namespace's pods;
- running pods (a field selector, so only those come back): GPUs requested per node, for
  dedicated nodes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from app.kube.manifests import labels as lbl
from app.kube.port import KubePort, Manifest
from app.kube.quantities import parse_quantity

GPU_KEYS = (lbl.GPU_RESOURCE, "gpu")  # KAI's status uses the resource name; "gpu" as a fallback
QUOTA_USED_KEYS = (f"requests.{lbl.GPU_RESOURCE}", lbl.GPU_RESOURCE)


@dataclass(frozen=True)
class QueueUse:
    tenant: str
    cluster: str
    allocated_gpus: float
    requested_gpus: float


@dataclass(frozen=True)
class NamespaceUse:
    tenant: str
    cluster: str
    used_gpus: float
    hard_gpus: float


@dataclass(frozen=True)
class HostUsage:
    queues: list[QueueUse] = field(default_factory=list)
    namespaces: list[NamespaceUse] = field(default_factory=list)
    gpus_by_node: dict[str, float] = field(default_factory=dict)


def read_host_usage(port: KubePort, *, pods_on_nodes: bool = True) -> HostUsage:
    """``pods_on_nodes=False`` skips the pod LIST (no node is dedicated to anyone)."""
    managed = lbl.managed()
    queues = port.list(lbl.KAI_API_VERSION, "Queue", label_selector=managed)
    quotas = port.list("v1", "ResourceQuota", label_selector=managed)
    pods = (port.list("v1", "Pod", field_selector={"status.phase": "Running"})
            if pods_on_nodes else [])
    return HostUsage(queues=[q for q in map(queue_use, queues) if q is not None],
                     namespaces=[n for n in map(namespace_use, quotas) if n is not None],
                     gpus_by_node=gpus_by_node(pods))


def _cluster_of(obj: Manifest) -> tuple[str, str] | None:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    tenant, cluster = labels.get(lbl.TENANT), labels.get(lbl.CLUSTER)
    return (tenant, cluster) if tenant and cluster else None


def _gpus(resources: Mapping[str, Any] | None, keys: tuple[str, ...]) -> float:
    for key in keys:
        if resources and key in resources:
            return float(parse_quantity(resources[key]))
    return 0.0


def queue_use(queue: Manifest) -> QueueUse | None:
    """A leaf queue's status; the tenant's parent queue (no cluster label) is left out."""
    owner = _cluster_of(queue)
    if owner is None:
        return None
    status = queue.get("status") or {}
    return QueueUse(*owner, allocated_gpus=_gpus(status.get("allocated"), GPU_KEYS),
                    requested_gpus=_gpus(status.get("requested"), GPU_KEYS))


def namespace_use(quota: Manifest) -> NamespaceUse | None:
    owner = _cluster_of(quota)
    if owner is None:
        return None
    status = quota.get("status") or {}
    return NamespaceUse(*owner, used_gpus=_gpus(status.get("used"), QUOTA_USED_KEYS),
                        hard_gpus=_gpus(status.get("hard"), QUOTA_USED_KEYS))


def pod_gpu_request(pod: Manifest) -> Decimal:
    """GPUs a pod holds: its containers' sum, or its largest init container if larger.
    An extended resource's request equals its limit, so a limit alone counts too."""
    spec = pod.get("spec") or {}

    def of(container: Mapping[str, Any]) -> Decimal:
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            value = (resources.get(part) or {}).get(lbl.GPU_RESOURCE)
            if value is not None:
                return parse_quantity(value)
        return Decimal(0)

    running = sum((of(c) for c in spec.get("containers") or []), Decimal(0))
    first = max((of(c) for c in spec.get("initContainers") or []), default=Decimal(0))
    return max(running, first)


def gpus_by_node(pods: list[Manifest]) -> dict[str, float]:
    found: dict[str, Decimal] = defaultdict(Decimal)
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            found[node] += pod_gpu_request(pod)
    return {node: float(gpus) for node, gpus in sorted(found.items())}
