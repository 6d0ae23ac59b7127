"""What the host reports about GPU use, read in three LISTs per pass whatever the fleet's size.

- each portal-made KAI queue's ``status`` (written by KAI's queue controller): GPUs allocated to
  running workloads and requested by running and pending ones; and its ``spec``'s GPU quota,
  the guarantee beyond which KAI's allocation is burst (``burst_of``);
- each portal-made ResourceQuota's ``status.used`` (written by the controller-manager's quota
  controller): GPUs requested by the namespace's pods, and MIG slices per profile;
- running pods (a field selector, so only those come back): GPUs requested per node, for
  dedicated nodes;
- pending pods of KAI's scheduler: the GPU pods that wait for GPUs, per namespace, with the
  reason KAI's scheduler gave them.

A pod asks for whole GPUs (``nvidia.com/gpu``), a share of one GPU (KAI's ``gpu-fraction``
annotation) or MIG slices (``nvidia.com/mig-<profile>``): ``pod_gpu_ask``. A queue's status
keeps them apart: KAI's podgroup controller sums the containers' requests and, for a pod bound
to a fraction, the fraction it received, and its queue controller sums those per resource name;
so whole GPUs and fractions are both under ``nvidia.com/gpu`` (a fraction in any quantity form,
"250m" or "0.25"), and slices under their own ``nvidia.com/mig-<profile>``, one per slice (never
the g-count KAI weighs them by in its fair share).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple

from app.kit.gpu_units import MIG_RESOURCE_PREFIX as MIG_PREFIX
from app.kit.gpu_units import profile_of_resource
from app.kube.manifests import labels as lbl
from app.kube.port import KubePort, Manifest
from app.kube.quantities import parse_quantity

# KAI's queue controller sums its PodGroups' resourcesStatus into the Queue's status, keyed by
# resource name: whole GPUs and GPU fractions (gpu-fraction / gpu-memory pods) both under
# nvidia.com/gpu, a fraction as a decimal quantity ("500m"). The "gpu" key is only the spec's.
GPU_KEYS = (lbl.GPU_RESOURCE,)
QUOTA_USED_KEYS = (f"requests.{lbl.GPU_RESOURCE}", lbl.GPU_RESOURCE)
# KAI's pod annotations of GPU sharing: a fraction of one GPU in (0, 1], on so many devices.
GPU_FRACTION = "gpu-fraction"
GPU_FRACTION_DEVICES = "gpu-fraction-num-devices"
_REQUESTS = "requests."


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
    # MIG slices per profile, allocated and requested: counted apart from GPUs (KAI's status
    # keys each profile by its own resource name).
    allocated_slices: Mapping[str, float] = field(default_factory=dict)
    requested_slices: Mapping[str, float] = field(default_factory=dict)

    @property
    def burst_gpus(self) -> float:
        return burst_of(self.allocated_gpus, self.quota_gpus)

    @property
    def guaranteed_gpus(self) -> float:
        """The part of the allocation within the queue's guarantee."""
        return self.allocated_gpus - self.burst_gpus

    def in_unit(self, unit: str, profile: str = "") -> tuple[float, float, float]:
        """Allocated, requested and burst in a cluster's unit: GPUs (fractions as such) for
        whole GPUs and shares, slices of ``profile`` for MIG. Slices never burst: a MIG
        queue's limit is its quota (and its quota is in KAI's g-count, not in slices)."""
        if unit == "mig":
            return (self.allocated_slices.get(profile, 0.0),
                    self.requested_slices.get(profile, 0.0), 0.0)
        return self.allocated_gpus, self.requested_gpus, self.burst_gpus


@dataclass(frozen=True)
class NamespaceUse:
    tenant: str
    cluster: str
    used_gpus: float
    hard_gpus: float
    # requests.nvidia.com/mig-<profile> per profile, used and hard.
    used_slices: Mapping[str, float] = field(default_factory=dict)
    hard_slices: Mapping[str, float] = field(default_factory=dict)

    def in_unit(self, unit: str, profile: str = "") -> tuple[float, float]:
        """Used and hard in a cluster's unit: slices of ``profile`` for MIG, else GPUs (a
        share's namespace caps whole GPUs at 0: fractions request no extended resource)."""
        if unit == "mig":
            return self.used_slices.get(profile, 0.0), self.hard_slices.get(profile, 0.0)
        return self.used_gpus, self.hard_gpus

    @property
    def full(self) -> bool:
        """Some GPU line of the quota is used up: only then can it refuse a GPU pod."""
        lines = [(self.used_gpus, self.hard_gpus),
                 *((used, self.hard_slices[p]) for p, used in self.used_slices.items()
                   if p in self.hard_slices)]
        return any(hard > 0 and used >= hard for used, hard in lines)


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


def _slices(resources: Mapping[str, Any] | None, prefix: str = "") -> dict[str, float]:
    """MIG slices per profile under ``<prefix>nvidia.com/mig-<profile>`` keys; a profile KAI
    cannot count is left out, as the portal never grants one."""
    found: dict[str, float] = {}
    for key, value in (resources or {}).items():
        profile = profile_of_resource(key.removeprefix(prefix)) if key.startswith(prefix) else None
        if profile is not None:
            found[profile] = float(parse_quantity(value))
    return found


def queue_use(queue: Manifest) -> QueueUse | None:
    """A leaf queue's status; the tenant's parent queue (no cluster label) is left out."""
    owner = _cluster_of(queue)
    if owner is None:
        return None
    status = queue.get("status") or {}
    allocated, requested = status.get("allocated"), status.get("requested")
    return QueueUse(*owner, allocated_gpus=_gpus(allocated, GPU_KEYS),
                    requested_gpus=_gpus(requested, GPU_KEYS),
                    quota_gpus=quota_gpus(queue), allocated_slices=_slices(allocated),
                    requested_slices=_slices(requested))


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
    used, hard = status.get("used"), status.get("hard")
    return NamespaceUse(*owner, used_gpus=_gpus(used, QUOTA_USED_KEYS),
                        hard_gpus=_gpus(hard, QUOTA_USED_KEYS),
                        used_slices=_slices(used, _REQUESTS), hard_slices=_slices(hard, _REQUESTS))


class GpuAsk(NamedTuple):
    """What a pod asks for: ``amount`` whole GPUs (``gpu``), a share of GPUs as a fraction
    (``share``, 0.25 of one GPU; times its devices), or ``amount`` slices of ``profile``
    (``mig``). Nothing: ``gpu`` 0."""

    unit: str
    profile: str
    amount: Decimal


NO_GPUS = GpuAsk("gpu", "", Decimal(0))


def pod_gpu_ask(pod: Manifest) -> GpuAsk:
    """A pod's GPU ask. A valid ``gpu-fraction`` (0 < f <= 1; KAI ignores any other value
    and treats the pod as one without GPUs) makes it a share; else its MIG slices (the
    profile it asks most of) if it asks any; else its whole GPUs. Containers' sums, or the
    largest init container if larger; an extended resource's request equals its limit, so a
    limit alone counts too."""
    fraction = _fraction(pod)
    if fraction is not None:
        return GpuAsk("share", "", fraction)
    asked = _extended_resources(pod)
    slices = {profile: amount for key, amount in asked.items()
              if amount > 0 and (profile := profile_of_resource(key)) is not None}
    if slices:
        profile = max(sorted(slices), key=lambda p: slices[p])
        return GpuAsk("mig", profile, slices[profile])
    return GpuAsk("gpu", "", asked.get(lbl.GPU_RESOURCE, Decimal(0)))


def _fraction(pod: Manifest) -> Decimal | None:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if GPU_FRACTION not in annotations:
        return None
    try:
        fraction = parse_quantity(str(annotations[GPU_FRACTION]))
        devices = parse_quantity(str(annotations.get(GPU_FRACTION_DEVICES, "1")))
    except (TypeError, ValueError, ArithmeticError):
        return None
    if not 0 < fraction <= 1 or devices < 1:
        return None
    return fraction * devices


def _extended_resources(pod: Manifest) -> dict[str, Decimal]:
    """GPU-like resources per name: the containers' sum, or the largest init container's."""
    spec = pod.get("spec") or {}

    def of(container: Mapping[str, Any]) -> dict[str, Decimal]:
        resources = container.get("resources") or {}
        found: dict[str, Decimal] = {}
        for part in ("limits", "requests"):  # requests win where both are given
            for key, value in (resources.get(part) or {}).items():
                if key == lbl.GPU_RESOURCE or key.startswith(MIG_PREFIX):
                    found[key] = parse_quantity(value)
        return found

    running: dict[str, Decimal] = defaultdict(Decimal)
    for container in spec.get("containers") or []:
        for key, amount in of(container).items():
            running[key] += amount
    for container in spec.get("initContainers") or []:
        for key, amount in of(container).items():
            running[key] = max(running[key], amount)
    return dict(running)


def pod_gpus(pod: Manifest) -> Decimal:
    """GPUs a pod holds on a node, a share as its fraction; MIG slices are no whole GPUs."""
    ask = pod_gpu_ask(pod)
    return Decimal(0) if ask.unit == "mig" else ask.amount


def gpus_by_node(pods: list[Manifest]) -> dict[str, float]:
    found: dict[str, Decimal] = defaultdict(Decimal)
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            found[node] += pod_gpus(pod)
    return {node: float(gpus) for node, gpus in sorted(found.items())}


def waiting_pods(pending: list[Manifest]) -> list[WaitingPods]:
    """Unbound pods that ask for GPUs, per namespace. KAI's scheduler writes why a pod waits
    into its ``PodScheduled`` condition (status False, reason Unschedulable) on every cycle."""
    reasons: dict[str, list[str]] = defaultdict(list)
    for pod in pending:
        if (pod.get("spec") or {}).get("nodeName") or not pod_gpu_ask(pod).amount:
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
               if not (pod.get("spec") or {}).get("nodeName") and pod_gpu_ask(pod).amount]
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
