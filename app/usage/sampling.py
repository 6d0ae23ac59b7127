"""What a host's GPU use becomes in the portal: samples, GPUs in use per tenant and class, and
each cluster's pods waiting for GPUs. Pure steps over one reading of a host (the worker's usage
kind, app/reconcilers/usage.py, takes the readings).

Each figure is in its cluster's unit (app.kit.gpu_units): GPUs for whole GPUs and for shares
(0.5 for half a GPU), slices of the cluster's profile for MIG, never KAI's g-count. A sample and
a row of GPUs in use carry that unit and profile."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.clusters import service as cluster_service
from app.kube.manifests.names import host_namespace_name
from app.kube.usage import HostUsage, WaitingPods
from app.quotas import service as quota_service
from app.quotas.repository import BoundGpus, InUseKey
from app.usage import samples

# How long a sample stands without a next one, at the default resync (300 s).
DEFAULT_HOLD_S = 600
# What the GPUs of a queue (tenant slug, cluster name) and of a node (its name) did when the
# host was read: their utilisation / 100 summed, and how many GPUs the figure is of (the
# worker's usage kind reads it from the operator's Prometheus; app.utilisation.weights).
Utilised = Mapping[tuple[str, str] | str, tuple[float, int]]


def record_usage(db: Session, host_id: int, usage: HostUsage, now_s: int,
                 dedicated: dict[str, samples.Owner],
                 refused: Mapping[tuple[str, str], WaitingPods] | None = None,
                 holds_s: int = DEFAULT_HOLD_S, *, utilised: Utilised | None = None) -> int:
    """Stores one sample per queue, namespace quota and dedicated node the portal knows on the
    host ``usage`` was read from (``dedicated``: that host's assigned nodes by name), and what
    is bound and waiting there now (``refused``: what waits inside virtual clusters, by
    tenant and cluster name). Queue and node samples carry how many of their GPUs computed
    (``utilised``; None: Prometheus could not say, every such figure unknown)."""
    clusters = samples.clusters_by_name(db, host_id)
    rows: list[dict[str, object]] = []
    for queue in usage.queues:
        owner = clusters.get((queue.tenant, queue.cluster))
        if owner is not None:
            allocated, requested, burst = queue.in_unit(owner.unit, owner.mig_profile)
            rows.append(_row(now_s, "queue", owner, allocated, allocated, requested, holds_s,
                             burst=burst, utilised=_utilised_of(
                                 utilised, owner, (queue.tenant, queue.cluster), allocated)))
    for namespace in usage.namespaces:
        owner = clusters.get((namespace.tenant, namespace.cluster))
        if owner is not None:
            used, hard = namespace.in_unit(owner.unit, owner.mig_profile)
            rows.append(_row(now_s, "quota", owner, used, hard, used, holds_s))
    for name, node in dedicated.items():
        used = usage.gpus_by_node.get(name, 0.0)
        rows.append(_row(now_s, "node", node, used, float(node.gpus), used, holds_s,
                         utilised=utilised_gpus(utilised, name, used)))
    samples.add_samples(db, rows)
    observed_at = datetime.fromtimestamp(now_s, UTC)
    quota_service.record_gpus_in_use(db, host_id, gpus_in_use(usage, clusters, dedicated),
                                     observed_at)
    cluster_service.record_gpu_waits(db, gpu_waits(usage, clusters, refused or {}),
                                     observed_at)
    cluster_service.record_gpus_in_use(db, cluster_gpus_in_use(usage, clusters), observed_at)
    return len(rows)


def _in_use_key(owner: samples.Owner) -> InUseKey | None:
    if owner.gpu_class_id is None:
        return None
    return (owner.tenant_id, owner.gpu_class_id, owner.unit, owner.mig_profile)


def gpus_in_use(usage: HostUsage, clusters: dict[tuple[str, str], samples.Owner],
                dedicated: dict[str, samples.Owner]) -> dict[InUseKey, BoundGpus]:
    """What is bound now per (tenant, class, unit, profile) on the host, and of that the
    burst: what KAI allocated to the clusters' queues in each cluster's unit (GPUs for whole
    GPUs and shares, slices for MIG), plus the running pods on dedicated nodes (whole GPUs;
    their pods are not KAI's, never burst). Every tenant, class and unit with a cluster or
    dedicated node on the host has a figure, 0 included."""
    found = {key: (0.0, 0.0) for owner in (*clusters.values(), *dedicated.values())
             if (key := _in_use_key(owner)) is not None}
    bound: list[tuple[samples.Owner | None, float, float]] = []
    for queue in usage.queues:
        owner = clusters.get((queue.tenant, queue.cluster))
        if owner is not None:
            allocated, _requested, burst = queue.in_unit(owner.unit, owner.mig_profile)
            bound.append((owner, allocated, burst))
    bound += [(node, usage.gpus_by_node.get(name, 0.0), 0.0) for name, node in dedicated.items()]
    for owner, gpus, burst in bound:
        key = _in_use_key(owner) if owner is not None else None
        if key is not None:
            found[key] = (found[key][0] + gpus, found[key][1] + burst)
    return {key: BoundGpus(gpus, burst) for key, (gpus, burst) in found.items()}


def cluster_gpus_in_use(usage: HostUsage, clusters: dict[tuple[str, str], samples.Owner]
                        ) -> dict[int, tuple[float, float] | None]:
    """Guaranteed and burst GPUs KAI allocated to each cluster's leaf queue on the host; None
    for the host's clusters without a queue there (dedicated nodes, or not made yet)."""
    found: dict[int, tuple[float, float] | None] = dict.fromkeys(
        (owner.subject_id for owner in clusters.values()), None)
    for queue in usage.queues:
        owner = clusters.get((queue.tenant, queue.cluster))
        if owner is not None:
            allocated, _requested, burst = queue.in_unit(owner.unit, owner.mig_profile)
            found[owner.subject_id] = (allocated - burst, burst)
    return found


def gpu_waits(usage: HostUsage, clusters: dict[tuple[str, str], samples.Owner],
              refused: Mapping[tuple[str, str], WaitingPods]) -> dict[int, tuple[int, str]]:
    """Pods waiting for GPUs and why, for each cluster on the host (none: 0): KAI's reason
    while KAI holds some, else the syncer's (the host quota refused them). The virtual
    cluster's count includes the pods KAI holds: they are Pending there too."""
    waits = {owner.subject_id: (0, "") for owner in clusters.values()}
    on_host = {waiting.namespace: waiting for waiting in usage.waiting}
    for (tenant, name), owner in clusters.items():
        held = on_host.get(host_namespace_name(tenant, name))
        inside = refused.get((tenant, name))
        count = max(held.pods if held else 0, inside.pods if inside else 0)
        if count:
            reason = held.reason if held and held.reason else inside.reason if inside else ""
            waits[owner.subject_id] = (count, reason)
    return waits


def sample_hold(resync_seconds: float) -> int:
    """How long a sample stands if no other follows: two resyncs, from 30 s to an hour."""
    return int(min(max(2 * resync_seconds, 30), 3600))


def utilised_gpus(utilised: Utilised | None, subject: tuple[str, str] | str,
                  used: float) -> float | None:
    """Of ``used`` GPUs, how many computed, at most ``used``: 0 when none is bound; None
    (unknown, never 0) without a reading, or when it shows fewer of the subject's GPUs than
    are bound (a GPU the exporter does not report is not taken for an idle one)."""
    if utilised is None:
        return None
    if used <= 0:
        return 0.0
    computing, seen = utilised.get(subject, (0.0, 0))
    if seen < used - 1e-9:
        return None
    return min(computing, used)


def _utilised_of(utilised: Utilised | None, owner: samples.Owner, subject: tuple[str, str],
                 used: float) -> float | None:
    """The DCGM exporter reports whole GPUs, not slices: a MIG queue's figure is unknown."""
    if owner.unit == "mig":
        return None if utilised is None or used > 0 else 0.0
    return utilised_gpus(utilised, subject, used)


def _row(now_s: int, source: str, owner: samples.Owner, used: float, allocated: float,
         requested: float, holds_s: int, burst: float = 0.0,
         utilised: float | None = None) -> dict[str, object]:
    """Only a queue's sample has burst: dedicated nodes and namespace quotas lend nothing."""
    return {"taken_s": now_s, "source": source, "tenant_id": owner.tenant_id,
            "gpu_class_id": owner.gpu_class_id, "subject_id": owner.subject_id,
            "unit": owner.unit, "mig_profile": owner.mig_profile, "used_gpus": used,
            "allocated_gpus": allocated, "requested_gpus": requested,
            "holds_s": holds_s, "burst_gpus": burst, "utilised_gpus": utilised}
