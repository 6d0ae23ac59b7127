"""The worker side of usage: on each resync, what each host reports becomes samples.

Per host, four LISTs (queues, quotas, KAI's pending pods, and running pods while a node there
is dedicated) and one transaction for its samples, its GPUs in use per tenant and class and its
clusters' pods waiting for GPUs; then the raw samples past their retention are folded into
hourly ones in the same pass. A host's objects count only for the clusters and nodes placed
on that host.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.clusters import service as cluster_service
from app.clusters.models import VirtualCluster
from app.database.core import Database
from app.hosts import service as hosts_service
from app.kit.config import Settings
from app.kit.errors import ProblemError
from app.kube.connector import HostTarget, KubeConnector, for_host
from app.kube.errors import KubeError
from app.kube.manifests.names import host_namespace_name
from app.kube.usage import HostUsage, WaitingPods, read_host_usage, read_virtual_waits
from app.kubeconfigs.service import VirtualClusters
from app.quotas import service as quota_service
from app.usage import ledger, samples

log = logging.getLogger(__name__)
# A host that could not be read is skipped for a while, doubling from two resyncs (of at least
# a second each) to this: an unreachable host costs the others a client timeout per try, not
# per pass.
MAX_HOST_BACKOFF_SECONDS = 600.0
# How long a sample stands without a next one, at the default resync (300 s).
DEFAULT_HOLD_S = 600


class UsageSampler:
    """Each pass reads every registered host the portal can reach, each with its own client,
    and stores that host's samples in a transaction of its own. A host that cannot be read is
    logged and skipped: its earlier samples stay, the other hosts are sampled as usual, and it
    is tried again after a backoff that doubles while it keeps failing."""

    name = "usage"

    def __init__(self, settings: Settings, database: Database, kube: KubeConnector, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.database = database
        self.kube = kube
        self.virtual_clusters = VirtualClusters.from_settings(settings, kube)
        self.resync_seconds = settings.worker_resync_seconds
        self.clock = clock
        self._next_pass = 0.0
        self._failures: dict[int, int] = {}
        self._retry_at: dict[int, float] = {}

    def run_due(self, worker_id: str) -> int:
        if self.clock() < self._next_pass:
            return 0
        self._next_pass = self.clock() + self.resync_seconds
        with self.database.transaction() as db:
            targets = hosts_service.targets(db, self.settings)
            dedicated = samples.dedicated_nodes_by_host(db)
        now_s = int(ledger.now_in_seconds().timestamp())
        taken = 0
        for target in targets:
            if self._retry_at.get(target.host_id, 0.0) > self.clock():
                continue
            on_host = dedicated.get(target.host_id, {})
            usage = self._read(target, pods_on_nodes=bool(on_host))
            self._note(target.host_id, failed=usage is None)
            if usage is not None:
                refused = self._refused_pods(target.host_id, usage)
                with self.database.transaction() as db:
                    taken += record_usage(db, target.host_id, usage, now_s, on_host, refused,
                                          sample_hold(self.resync_seconds))
        with self.database.transaction() as db:
            samples.fold_old_samples(db, now_s)
            samples.expire_hourly(db, now_s)
        return taken

    def _note(self, host_id: int, *, failed: bool) -> None:
        if not failed:
            self._failures.pop(host_id, None)
            self._retry_at.pop(host_id, None)
            return
        failures = self._failures[host_id] = self._failures.get(host_id, 0) + 1
        delay = max(self.resync_seconds, 1.0) * 2 ** failures
        self._retry_at[host_id] = self.clock() + min(delay, MAX_HOST_BACKOFF_SECONDS)

    def _refused_pods(self, host_id: int, usage: HostUsage) -> dict[tuple[str, str], WaitingPods]:
        """For the clusters whose host quota is full (only then can it refuse a pod), the GPU
        pods waiting in the virtual cluster itself, some never synced to the host."""
        full = {(n.tenant, n.cluster) for n in usage.namespaces
                if n.hard_gpus > 0 and n.used_gpus >= n.hard_gpus}
        if not full:
            return {}
        with self.database.session() as db:
            clusters = [(slug, cluster) for slug, cluster in samples.ready_clusters(db, host_id)
                        if (slug, cluster.name) in full]
        found: dict[tuple[str, str], WaitingPods] = {}
        for slug, cluster in clusters:  # no database connection held while they answer
            waits = self._read_virtual(cluster)
            if waits is not None:
                found[slug, cluster.name] = waits
        return found

    def _read_virtual(self, cluster: VirtualCluster) -> WaitingPods | None:
        port = None
        try:
            port = self.virtual_clusters.port(cluster)
            return read_virtual_waits(port)
        except (KubeError, ProblemError) as error:
            log.warning("reading the pods of virtual cluster %s failed (%s)", cluster.name,
                        getattr(error, "message", None) or getattr(error, "detail", ""))
        finally:
            close = getattr(port, "close", None)
            if callable(close):
                close()
        return None

    def _read(self, target: HostTarget, *, pods_on_nodes: bool) -> HostUsage | None:
        try:
            port = for_host(self.kube, target)
            if port is None:
                return None
            return read_host_usage(port, pods_on_nodes=pods_on_nodes)
        except KubeError as error:
            log.warning("reading GPU use from host cluster %s failed (%s); its last samples "
                        "stay; tried again after a backoff", target.name, error.message)
        except Exception as error:  # credentials the client cannot use: this host only
            log.error("reading GPU use from host cluster %s failed (%s); tried again after a "
                      "backoff",
                      target.name, type(error).__name__)
        return None


def record_usage(db: Session, host_id: int, usage: HostUsage, now_s: int,
                 dedicated: dict[str, samples.Owner],
                 refused: Mapping[tuple[str, str], WaitingPods] | None = None,
                 holds_s: int = DEFAULT_HOLD_S) -> int:
    """Stores one sample per queue, namespace quota and dedicated node the portal knows on the
    host ``usage`` was read from (``dedicated``: that host's assigned nodes by name), and what
    is bound and waiting there now (``refused``: what waits inside virtual clusters, by
    tenant and cluster name)."""
    clusters = samples.clusters_by_name(db, host_id)
    rows: list[dict[str, object]] = []
    for queue in usage.queues:
        owner = clusters.get((queue.tenant, queue.cluster))
        if owner is not None:
            rows.append(_row(now_s, "queue", owner, queue.allocated_gpus,
                             queue.allocated_gpus, queue.requested_gpus, holds_s))
    for namespace in usage.namespaces:
        owner = clusters.get((namespace.tenant, namespace.cluster))
        if owner is not None:
            rows.append(_row(now_s, "quota", owner, namespace.used_gpus, namespace.hard_gpus,
                             namespace.used_gpus, holds_s))
    for name, node in dedicated.items():
        used = usage.gpus_by_node.get(name, 0.0)
        rows.append(_row(now_s, "node", node, used, float(node.gpus), used, holds_s))
    samples.add_samples(db, rows)
    observed_at = datetime.fromtimestamp(now_s, UTC)
    quota_service.record_gpus_in_use(db, host_id, gpus_in_use(usage, clusters, dedicated),
                                     observed_at)
    cluster_service.record_gpu_waits(db, gpu_waits(usage, clusters, refused or {}),
                                     observed_at)
    return len(rows)


def gpus_in_use(usage: HostUsage, clusters: dict[tuple[str, str], samples.Owner],
                dedicated: dict[str, samples.Owner]) -> dict[tuple[int, int], float]:
    """GPUs bound now per (tenant, class) on the host: what KAI allocated to the clusters'
    queues, plus the running pods on dedicated nodes (their pods are not KAI's). Every tenant
    and class with a cluster or dedicated node on the host has a figure, 0 included."""
    found = {(owner.tenant_id, owner.gpu_class_id): 0.0
             for owner in (*clusters.values(), *dedicated.values())
             if owner.gpu_class_id is not None}
    bound = [(clusters.get((q.tenant, q.cluster)), q.allocated_gpus) for q in usage.queues]
    bound += [(node, usage.gpus_by_node.get(name, 0.0)) for name, node in dedicated.items()]
    for owner, gpus in bound:
        if owner is not None and owner.gpu_class_id is not None:
            found[owner.tenant_id, owner.gpu_class_id] += gpus
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


def _row(now_s: int, source: str, owner: samples.Owner, used: float, allocated: float,
         requested: float, holds_s: int) -> dict[str, object]:
    return {"taken_s": now_s, "source": source, "tenant_id": owner.tenant_id,
            "gpu_class_id": owner.gpu_class_id, "subject_id": owner.subject_id,
            "used_gpus": used, "allocated_gpus": allocated, "requested_gpus": requested,
            "holds_s": holds_s}
