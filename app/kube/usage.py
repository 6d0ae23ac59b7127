"""What the host reports about GPU use, read in three LISTs per pass whatever the fleet's size.

- each portal-made KAI queue's ``status`` (written by KAI's queue controller): GPUs allocated to
  running workloads and requested by running and pending ones; and its ``spec``'s GPU quota,
  the guarantee beyond which KAI's allocation is burst (``burst_of``);
- each portal-made ResourceQuota's ``status.used`` (written by the controller-manager's quota
  controller): GPUs requested by the namespace's pods;
- running pods (a field selector, so only those come back): GPUs requested per node, for
  dedicated nodes;
- pending pods of KAI's scheduler: the GPU pods that wait for GPUs, per namespace, with the
  reason KAI's scheduler gave them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from app.kube.manifests import labels as lbl
from app.kube.port import KubePort, Manifest
from app.kube.quantities import parse_quantity

# KAI's queue controller sums its PodGroups' resourcesStatus into the Queue's status, keyed by
# resource name: whole GPUs and GPU fractions (gpu-fraction / gpu-memory pods) both under
# nvidia.com/gpu, a fraction as a decimal quantity ("500m"). The "gpu" key is only the spec's.
GPU_KEYS = (lbl.GPU_RESOURCE,)
QUOTA_USED_KEYS = (f"requests.{lbl.GPU_RESOURCE}", lbl.GPU_RESOURCE)


def burst_of(allocated_gpus: float, quota_gpus: float | None) -> float:
    """GPUs KAI lent a leaf queue beyond its guarantee (its quota) from idle ones, which it
    takes back when another queue needs its own guarantee. With no guarantee known (no quota,
    or a negative one) nothing counts as burst."""
    if quota_gpus is None:
        return 0.0
    return max(0.0, allocated_gpus - quota_gpus)


@dataclass(frozen=True)
class QueueUse:
    tenant: str
    cluster: str
    allocated_gpus: float
    requested_gpus: float
    # The queue's own spec.resources.gpu.quota, as KAI sees it; None: no guarantee known.
    quota_gpus: float | None = None

    @property
    def burst_gpus(self) -> float:
        return burst_of(self.allocated_gpus, self.quota_gpus)

    @property
    def guaranteed_gpus(self) -> float:
        """The part of the allocation within the queue's guarantee."""
        return self.allocated_gpus - self.burst_gpus


@dataclass(frozen=True)
class NamespaceUse:
    tenant: str
    cluster: str
    used_gpus: float
    hard_gpus: float


@dataclass(frozen=True)
class WaitingPods:
    """A namespace's GPU pods that KAI has not bound yet, and why, in KAI's words."""

    namespace: str
    pods: int
    reason: str  # the most common message among them; "" before KAI has looked at them


@dataclass(frozen=True)
class HostUsage:
    queues: list[QueueUse] = field(default_factory=list)
    namespaces: list[NamespaceUse] = field(default_factory=list)
    gpus_by_node: dict[str, float] = field(default_factory=dict)
    waiting: list[WaitingPods] = field(default_factory=list)


# The reason of the event vCluster's syncer records on a pod it could not create on the host.
SYNC_ERROR = "SyncError"
KAI_PENDING = {"status.phase": "Pending", "spec.schedulerName": lbl.KAI_SCHEDULER_NAME}


def read_host_usage(port: KubePort, *, pods_on_nodes: bool = True) -> HostUsage:
    """``pods_on_nodes=False`` skips the LIST of running pods (no node is dedicated)."""
    managed = lbl.managed()
    queues = port.list(lbl.KAI_API_VERSION, "Queue", label_selector=managed)
    quotas = port.list("v1", "ResourceQuota", label_selector=managed)
    pods = (port.list("v1", "Pod", field_selector={"status.phase": "Running"})
            if pods_on_nodes else [])
    pending = port.list("v1", "Pod", field_selector=KAI_PENDING)
    return HostUsage(queues=[q for q in map(queue_use, queues) if q is not None],
                     namespaces=[n for n in map(namespace_use, quotas) if n is not None],
                     gpus_by_node=gpus_by_node(pods), waiting=waiting_pods(pending))


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
                    requested_gpus=_gpus(status.get("requested"), GPU_KEYS),
                    quota_gpus=quota_gpus(queue))


def quota_gpus(queue: Manifest) -> float | None:
    """The queue's GPU quota from its spec; None when missing, negative (KAI's -1 means
    unlimited) or unreadable."""
    gpu = (((queue.get("spec") or {}).get("resources") or {}).get("gpu") or {})
    value = gpu.get("quota")
    if value is None:
        return None
    try:
        found = float(value) if isinstance(value, int | float) else float(parse_quantity(value))
    except (TypeError, ValueError):
        return None
    return found if found >= 0 else None


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


def waiting_pods(pending: list[Manifest]) -> list[WaitingPods]:
    """Unbound pods that ask for GPUs, per namespace. KAI's scheduler writes why a pod waits
    into its ``PodScheduled`` condition (status False, reason Unschedulable) on every cycle."""
    reasons: dict[str, list[str]] = defaultdict(list)
    for pod in pending:
        if (pod.get("spec") or {}).get("nodeName") or not pod_gpu_request(pod):
            continue
        reasons[(pod.get("metadata") or {}).get("namespace", "")].append(unschedulable(pod))
    return [WaitingPods(namespace, len(found), _most_common(found))
            for namespace, found in sorted(reasons.items())]


def read_virtual_waits(port: KubePort) -> WaitingPods:
    """A virtual cluster's GPU pods not bound yet, as its users see them: those KAI holds on
    the host, and those the syncer could not create there (the host namespace's quota refused
    them), with the syncer's reason for the latter (its ``SyncError`` event)."""
    pending = port.list("v1", "Pod", field_selector={"status.phase": "Pending"})
    waiting = [pod for pod in pending
               if not (pod.get("spec") or {}).get("nodeName") and pod_gpu_request(pod)]
    if not waiting:
        return WaitingPods("", 0, "")
    said = _sync_errors(port.list("v1", "Event", field_selector={"reason": SYNC_ERROR}))
    reasons = [said.get(_key(pod.get("metadata") or {}), "") for pod in waiting]
    return WaitingPods("", len(waiting), _most_common(reasons))


def _sync_errors(events: list[Manifest]) -> dict[tuple[str, str], str]:
    """The latest syncer error message per pod (namespace, name)."""
    latest: dict[tuple[str, str], tuple[str, str]] = {}
    for event in events:
        involved = event.get("involvedObject") or {}
        if involved.get("kind") != "Pod":
            continue
        at = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        key = _key(involved)
        if key not in latest or at >= latest[key][0]:
            latest[key] = (at, str(event.get("message") or ""))
    return {key: message for key, (_at, message) in latest.items()}


def _key(meta: Mapping[str, Any]) -> tuple[str, str]:
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def unschedulable(pod: Manifest) -> str:
    """The message of the pod's ``PodScheduled=False`` condition, or "" if it has none."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "")
    return ""


def _most_common(messages: list[str]) -> str:
    said = Counter(sorted(message for message in messages if message))
    return said.most_common(1)[0][0] if said else ""
