"""Which tenant and cluster a DCGM exporter series belongs to, and the figures of a set of GPUs.

The exporter labels each GPU's series with ``gpu``, ``UUID``, ``device``, ``modelName`` and
the node as ``Hostname`` (``hostname`` since dcgm-exporter renamed it), and, with the kubelet's
pod-resources mapping, the ``pod``, ``namespace`` and ``container`` the GPU is bound to
(``pod_name``, ``pod_namespace``, ``container_name`` with ``--use-old-namespace``). A
Prometheus that does not honour the exporter's labels keeps them as ``exported_namespace`` and
``exported_pod`` (its own ``namespace`` is then the exporter's). A shared-pool or
dedicated-nodes cluster's pods run in its host namespace; a dedicated node is its tenant's
whether a pod holds its GPUs or not; a private node is its cluster's. A series that maps to
nothing is no tenant's and is not shown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

NAMESPACE_LABELS = ("exported_namespace", "namespace", "exported_pod_namespace", "pod_namespace")
POD_LABELS = ("exported_pod", "pod", "exported_pod_name", "pod_name")
NODE_LABELS = ("Hostname", "hostname", "node", "kubernetes_node")


@dataclass(frozen=True)
class Owner:
    """A tenant, and its cluster when the GPU is one cluster's (None: the tenant's dedicated
    node with no pod of a cluster on it)."""

    tenant: str
    cluster: str | None
    gpu_class: str = ""


@dataclass(frozen=True)
class Ownership:
    """Host namespace to its cluster's owner; node name to its dedicated or private owner."""

    by_namespace: Mapping[str, Owner]
    by_node: Mapping[str, Owner]


@dataclass(frozen=True)
class Gpu:
    """One GPU a tenant holds, as the exporter names it, and what it does."""

    key: str
    owner: Owner
    node: str
    gpu: str
    model: str
    namespace: str
    pod: str
    utilisation_percent: float
    framebuffer_used_mib: float | None = None
    peak_in_window_percent: float | None = None

    def idle(self, threshold_percent: float) -> bool:
        """Idle past the window: even its highest utilisation in the window is below the
        threshold (a GPU without the window's figure is not called idle)."""
        return (self.peak_in_window_percent is not None
                and self.peak_in_window_percent < threshold_percent)


def unambiguous(pairs: Iterable[tuple[str, Owner]]) -> dict[str, Owner]:
    """Names to owners; a name two owners claim (one node name on two hosts) maps to neither."""
    found: dict[str, Owner] = {}
    claimed_twice: set[str] = set()
    for name, owner in pairs:
        if name in found and found[name] != owner:
            claimed_twice.add(name)
        found.setdefault(name, owner)
    return {name: owner for name, owner in found.items() if name not in claimed_twice}


def gpu_key(labels: Mapping[str, str]) -> str:
    """The GPU a series is of: its UUID, else its node and index."""
    uuid = labels.get("UUID") or labels.get("uuid")
    return uuid or f"{node_of(labels)}/{labels.get('gpu', '')}"


def node_of(labels: Mapping[str, str]) -> str:
    return next((labels[k] for k in NODE_LABELS if labels.get(k)), "")


def holder_of(labels: Mapping[str, str]) -> tuple[str, str]:
    """The namespace and pod a series names as holding its GPU (empty: none)."""
    return _first(labels, NAMESPACE_LABELS), _first(labels, POD_LABELS)


def _first(labels: Mapping[str, str], keys: Iterable[str]) -> str:
    return next((labels[k] for k in keys if labels.get(k)), "")


def owner_of(labels: Mapping[str, str], ownership: Ownership) -> Owner | None:
    """The pod's host namespace first (a shared-pool cluster's pods, or a dedicated-nodes
    cluster's on its nodes), then the node (a dedicated or private node's GPUs)."""
    for key in NAMESPACE_LABELS:
        owner = ownership.by_namespace.get(labels.get(key, ""))
        if owner is not None:
            return owner
    return ownership.by_node.get(node_of(labels))


def gpus_of(samples: Iterable[tuple[Mapping[str, str], float]], ownership: Ownership,
            framebuffer: Mapping[str, float], peaks: Mapping[str, float]) -> list[Gpu]:
    """The owned GPUs among utilisation samples, with their framebuffer and window's peak
    (both by ``gpu_key``); one GPU once, however many series name it."""
    gpus: dict[str, Gpu] = {}
    for labels, value in samples:
        owner = owner_of(labels, ownership)
        key = gpu_key(labels)
        if owner is None or key in gpus:
            continue
        gpus[key] = Gpu(
            key=key, owner=owner, node=node_of(labels), gpu=labels.get("gpu", ""),
            model=labels.get("modelName", ""), namespace=_first(labels, NAMESPACE_LABELS),
            pod=_first(labels, POD_LABELS), utilisation_percent=value,
            framebuffer_used_mib=framebuffer.get(key), peak_in_window_percent=peaks.get(key))
    return sorted(gpus.values(), key=lambda g: (g.owner.tenant, g.owner.cluster or "", g.key))


@dataclass(frozen=True)
class Figures:
    """A set of GPUs now: how many, their mean utilisation (None without any) and how many are
    idle past the window."""

    gpus_bound: int
    utilisation_percent: float | None
    gpus_idle: int
    framebuffer_used_mib: float | None


def figures(gpus: Iterable[Gpu], threshold_percent: float) -> Figures:
    held = list(gpus)
    used = [g.framebuffer_used_mib for g in held if g.framebuffer_used_mib is not None]
    mean = sum(g.utilisation_percent for g in held) / len(held) if held else None
    return Figures(gpus_bound=len(held), utilisation_percent=mean,
                   gpus_idle=sum(g.idle(threshold_percent) for g in held),
                   framebuffer_used_mib=sum(used) if used else None)


def mean_over_time(series: Iterable[tuple[Mapping[str, str], Iterable[tuple[float, float]]]],
                   ownership: Ownership,
                   wanted: Callable[[Owner], bool]) -> dict[float, float]:
    """At each step, the mean utilisation of the GPUs whose owner is ``wanted`` (by today's
    ownership); a step without any has no figure."""
    sums: dict[float, list[float]] = {}
    for labels, points in series:
        owner = owner_of(labels, ownership)
        if owner is None or not wanted(owner):
            continue
        for at, value in points:
            sums.setdefault(at, []).append(value)
    return {at: sum(values) / len(values) for at, values in sorted(sums.items())}
