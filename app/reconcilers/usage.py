"""Use samples, one host cluster per key: what each host reports becomes samples.

Per host, four LISTs (queues, quotas, KAI's pending pods, and running pods while a node there
is dedicated), one query of the operator's Prometheus for the GPUs' utilisation (when it is
set; outside the transaction, bounded; unknown when it cannot say) and one transaction for its
samples, its GPUs in use per tenant and class and its clusters' pods waiting for GPUs
(app/usage/sampling.py). A host's objects count only for the clusters and nodes placed on that
host. One more key, ``retention``, folds the raw samples past their retention into hourly ones
and drops hourly ones past theirs, once per period for every host.

The runtime reconciles each host at every resync period, and at once when the hosts service
registers, edits or re-enables it. A host that cannot be read keeps its earlier samples and
does not stop the others: one that does not answer opens its breaker, another failure is
retried with the runtime's backoff per key, credentials the client cannot use wait for the
next resync. The schedule runs on the clock the samples are stamped with (the ledger's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from app.database.core import Database
from app.kit.config import Settings
from app.kit.errors import ProblemError
from app.kube.connector import HostTarget, KubeConnector, for_host
from app.kube.errors import KubeError
from app.kube.evictions import Eviction, read_evictions
from app.kube.port import KubePort, release
from app.kube.usage import HostUsage, WaitingPods, read_host_usage, read_virtual_waits
from app.kubeconfigs.service import VirtualClusters
from app.reconcilers.host_keys import failure, host_keys, host_target, wait_for_breaker
from app.reconcilers.kind import DONE, GONE, Context, Outcome, TerminalError
from app.usage import ledger, samples
from app.usage.reclaims import record_evictions
from app.usage.sampling import Utilised, record_usage, sample_hold
from app.utilisation.repository import ownership
from app.utilisation.weights import utilised_by_subject
from app.workqueue import USAGE

log = logging.getLogger(__name__)
# The key that folds and expires the samples of every host.
RETENTION = "retention"


class UsageSampler:
    """Reads one registered host per key with that host's client, and stores that host's
    samples in a transaction of its own."""

    name = USAGE

    def __init__(self, settings: Settings, database: Database, kube: KubeConnector, *,
                 now: Callable[[], datetime] = ledger.now_in_seconds) -> None:
        self.settings = settings
        self.database = database
        self.kube = kube
        self.virtual_clusters = VirtualClusters.from_settings(settings, kube)
        self.resync_seconds = settings.worker_resync_seconds
        self.now = now

    def keys(self, db: Session) -> list[str]:
        return [*host_keys(db, self.settings), RETENTION]

    def reconcile(self, key: str, context: Context) -> Outcome:
        if key == RETENTION:
            return self._retention()
        target = host_target(self.database, self.settings, key)
        if target is None:
            return GONE
        wait_for_breaker(context, target.host_id)
        port = self._client(target)
        if port is None:
            return DONE  # this connector reaches no such host: nothing to read
        with self.database.session() as db:
            on_host = samples.dedicated_nodes_by_host(db).get(target.host_id, {})
        usage, evicted = self._read(target, port, pods_on_nodes=bool(on_host))
        context.hosts.reached(target.host_id)
        refused = self._refused_pods(target.host_id, usage)
        now = ledger.now_in_seconds()
        utilised = self._utilised(now) if usage.queues or on_host else None
        with self.database.transaction() as db:
            context.lease.fence(db)
            record_usage(db, target.host_id, usage, int(now.timestamp()), on_host, refused,
                         sample_hold(self.resync_seconds), utilised=utilised)
            record_evictions(db, target.host_id, evicted)
        return DONE

    def _utilised(self, at: datetime) -> Utilised | None:
        """How many GPUs of each queue and node computed, from the operator's Prometheus: one
        query, bounded by its timeout, with no database connection held while it answers;
        None (the samples' figures unknown) when it is unset, down or slow."""
        if not self.settings.prometheus_url:
            return None
        with self.database.session() as db:
            owners = ownership(db)
        return utilised_by_subject(owners, self.settings, at)

    def _retention(self) -> Outcome:
        now_s = int(ledger.now_in_seconds().timestamp())
        with self.database.transaction() as db:
            samples.fold_old_samples(db, now_s)
            samples.expire_hourly(db, now_s)
        return DONE

    def _refused_pods(self, host_id: int, usage: HostUsage) -> dict[tuple[str, str], WaitingPods]:
        """For the clusters whose host quota is full (only then can it refuse a pod), the GPU
        pods waiting in the virtual cluster itself, some never synced to the host."""
        full = {(n.tenant, n.cluster) for n in usage.namespaces if n.full}
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
            release(port)
        return None

    def _client(self, target: HostTarget) -> KubePort | None:
        try:
            return for_host(self.kube, target)
        except Exception as error:  # credentials the client cannot use: this host only
            log.error("reading GPU use from host cluster %s failed (%s); its last samples "
                      "stay; tried again at the next resync", target.name, type(error).__name__)
            raise TerminalError(f"host cluster {target.name}: no client from its credentials "
                                f"({type(error).__name__})") from error

    @staticmethod
    def _read(target: HostTarget, port: KubePort, *,
              pods_on_nodes: bool) -> tuple[HostUsage, list[Eviction]]:
        try:
            return read_host_usage(port, pods_on_nodes=pods_on_nodes), read_evictions(port)
        except KubeError as error:
            log.warning("reading GPU use from host cluster %s failed (%s); its last samples "
                        "stay", target.name, error.message)
            raise failure(target, error, "reading GPU use") from error
