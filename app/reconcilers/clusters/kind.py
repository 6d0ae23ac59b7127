"""The virtual cluster reconciler: makes the host cluster match each cluster row.

Level-triggered and idempotent: every reconcile reads the desired state from the database and
the actual state from Kubernetes, and applies only what differs. The runtime hands it one
cluster at a time under a fenced lease (``app.reconcilers.runtime``); every write to the row is
fenced on that lease and every write to the host checks it first.

Steps, each setting its condition: NamespaceReady, QuotaApplied (ResourceQuota, LimitRange),
NetworkPolicyApplied, QueuesApplied (KAI queues and the queue guard), ReleaseInstalled (helm),
then Ready (Secret ``vc-<release>`` exists and ``/readyz`` answers through it). The conditions
are saved together, before helm runs (so the tenant follows a long install) and at the end of
the reconcile: one write where there was one per step (``run.py``; add-ons in ``addons.py``,
taking a cluster down in ``deletion.py``).

Cost: a cluster still converged at its last generation is only read, and what it reads is
compared by value where the server rewrites it (resource quantities come back in canonical
form). Its objects are read from a list cache (``app.kube.cache``): each kind the portal labels
is LISTed once across all namespaces, and the snapshot serves every cluster for
``CACHE_SECONDS``. Only the Secret ``vc-<release>`` (the chart's, not labelled by the portal) is
a GET per cluster, plus ``/readyz``. Objects shared by many clusters (root and tenant queues,
the queue guard) are applied once per ``CACHE_SECONDS`` on each host. Conditions are written
only when they change, so an unchanged cluster costs no Kubernetes writes.

Errors: transient ones (429, 5xx, 409, connection trouble, helm failures) set the failed step's
condition and are retried by the runtime with backoff per cluster (at least the server's
Retry-After); permanent ones set the Failed condition, whose reason the tenant sees, and are
retried at the resync period in case an operator fixed the cause. A host that does not answer
opens its breaker: the clusters on it keep their last known conditions and wait for it. A host
that answers slowly takes at most its share of the worker's threads (``HostSlots``): its other
clusters wait a second while those of other hosts go on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from app.clusters import desired, repository
from app.clusters.models import VirtualCluster
from app.database.core import Database, utcnow
from app.hosts import repository as hosts_repository
from app.hosts import service as hosts_service
from app.hosts.webhook_route import routed
from app.kit.config import Settings
from app.kit.crypto import SecretBox
from app.kube import manifests
from app.kube.cache import ListCache
from app.kube.connector import HostTarget, KubeConnector, for_host
from app.kube.helm import HelmInstaller, Installer
from app.kube.port import KubePort, Manifest, ObjectRef
from app.reconcilers.clusters.results import Host
from app.reconcilers.clusters.run import ClusterRun, mark_invalid, to_outcome
from app.reconcilers.kind import GONE, Context, Deferred, Outcome
from app.reconcilers.runtime import RunsAlone
from app.workqueue import CLUSTERS

log = logging.getLogger(__name__)

WAIT_SECONDS = 3.0
# How soon a cluster whose host has its share of the pool busy is looked at again.
HOST_BUSY_SECONDS = 1.0
# How old the list cache's snapshot may be when it serves an unchanged cluster, and how long
# an object shared by many clusters counts as applied.
CACHE_SECONDS = 10.0
_ADMISSION = "admissionregistration.k8s.io/v1"
CACHED_KINDS = (("v1", "Namespace"), ("v1", "ResourceQuota"), ("v1", "LimitRange"),
                ("networking.k8s.io/v1", "NetworkPolicy"),
                (manifests.labels.KAI_API_VERSION, "Queue"),
                (_ADMISSION, "ValidatingAdmissionPolicy"),
                (_ADMISSION, "ValidatingAdmissionPolicyBinding"))


class SharedObjects:
    """Objects many clusters of a host want (shared queues, the queue guard): the last one
    applied of each, for ``CACHE_SECONDS``, and a lock per object so that concurrent
    reconciles apply it once."""

    def __init__(self, clock: Callable[[], datetime],
                 max_age_seconds: float = CACHE_SECONDS) -> None:
        self.clock = clock
        self.max_age = max_age_seconds
        self._applied: dict[tuple[int, ObjectRef], tuple[Manifest, datetime]] = {}
        self._locks: dict[tuple[int, ObjectRef], threading.Lock] = {}
        self._lock = threading.Lock()

    @contextmanager
    def ensuring(self, host_id: int, ref: ObjectRef) -> Iterator[None]:
        with self._lock:
            lock = self._locks.setdefault((host_id, ref), threading.Lock())
        with lock:
            yield

    def applied(self, host_id: int, ref: ObjectRef, obj: Manifest) -> bool:
        with self._lock:
            found = self._applied.get((host_id, ref))
        return found is not None and found[0] == obj and (
            (self.clock() - found[1]).total_seconds() < self.max_age)

    def remember(self, host_id: int, ref: ObjectRef, obj: Manifest) -> None:
        with self._lock:
            self._applied[(host_id, ref)] = (obj, self.clock())

    def forget(self, host_id: int) -> None:
        with self._lock:
            self._applied = {k: v for k, v in self._applied.items() if k[0] != host_id}


@dataclass(frozen=True)
class Loaded:
    """What a reconcile read of its cluster before touching the host."""

    wanted: desired.DesiredCluster | None
    invalid: tuple[int, list[dict[str, object]], str] | None
    failed_attempts: int
    observed_generation: int
    host_id: int
    target: HostTarget | None


class ClusterReconciler(RunsAlone):
    name = CLUSTERS

    def __init__(
        self,
        settings: Settings,
        database: Database,
        connector: KubeConnector,
        installer: Installer | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
        wait_seconds: float = WAIT_SECONDS,
        list_cache: bool = True,
    ) -> None:
        self.settings = settings
        self.database = database
        self.connector = connector
        self.installer = installer or HelmInstaller.from_settings(settings)
        self.clock = self.now = clock
        self.wait_seconds = wait_seconds
        self.box = SecretBox.from_settings(settings)
        self.list_cache = list_cache
        self._cache_lock = threading.Lock()
        self._caches: dict[int, ListCache] = {}
        self.shared = SharedObjects(clock)

    @property
    def resync_seconds(self) -> float:
        return float(self.settings.worker_resync_seconds)

    def keys(self, db: Session) -> list[str]:
        return [str(cluster_id) for cluster_id in repository.every_cluster_id(db)]

    def cache(self, host_id: int, port: KubePort) -> ListCache | None:
        """The list cache over one host, when the cache is on."""
        if not self.list_cache:
            return None
        with self._cache_lock:
            found = self._caches.get(host_id)
            if found is None or found.port is not port:
                found = ListCache(port, CACHED_KINDS, manifests.labels.managed(),
                                  max_age_seconds=CACHE_SECONDS,
                                  clock=lambda: self.clock().timestamp())
                self._caches[host_id] = found
            return found

    def target(self, db: Session, host_id: int) -> HostTarget | None:
        """How the connector reaches the host; None when the portal has no way to."""
        row = hosts_repository.host_by_id(db, host_id)
        return hosts_service.target_for(row, self.settings) if row is not None else None

    def port(self, target: HostTarget | None) -> KubePort | None:
        return for_host(self.connector, target) if target is not None else None

    def installer_for(self, target: HostTarget | None) -> Installer:
        """The installer against the cluster's own host (helm: the host's stored kubeconfig,
        else the environment's), when it can tell hosts apart."""
        per_host = getattr(self.installer, "for_host", None)
        if target is None or per_host is None:
            return self.installer
        installer: Installer = per_host(target)
        return installer

    def reconcile(self, key: str, context: Context) -> Outcome:
        loaded = self._load(int(key))
        if loaded is None:
            return GONE
        if loaded.wanted is None:
            assert loaded.invalid is not None
            return mark_invalid(self, int(key), context, *loaded.invalid)
        with context.slots.hold(loaded.host_id) as slot:
            if not slot:
                # The host has its share of the pool busy (slow, or long helm runs): the
                # clusters of other hosts go first.
                raise Deferred(f"host cluster {loaded.host_id} has its share of the worker "
                               "busy", delay=HOST_BUSY_SECONDS)
            return self._run(loaded, context)

    def _run(self, loaded: Loaded, context: Context) -> Outcome:
        assert loaded.wanted is not None
        target = loaded.target
        where = Host(loaded.host_id, target.name if target else f"#{loaded.host_id}",
                     self.port(target), self.installer_for(target),
                     target is None or routed(target))
        run = ClusterRun(self, loaded.wanted, context, loaded.failed_attempts,
                         loaded.observed_generation, where)
        return to_outcome(run, run.run())

    def _load(self, cluster_id: int) -> Loaded | None:
        with self.database.transaction() as db:
            cluster = db.get(VirtualCluster, cluster_id)
            if cluster is None:
                return None
            target = self.target(db, cluster.host_cluster_id)
            try:
                wanted, invalid = desired.load(db, cluster, self.settings), None
            except ValueError as error:
                wanted = None
                invalid = (cluster.generation, list(cluster.conditions or []), str(error))
            return Loaded(wanted, invalid, cluster.failed_attempts, cluster.observed_generation,
                          cluster.host_cluster_id, target)
