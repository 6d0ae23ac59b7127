"""The virtual cluster reconciler: makes the host cluster match each cluster row.

Level-triggered and idempotent: every reconcile reads the desired state from the database and
the actual state from Kubernetes, and applies only what differs. The runtime hands it one
cluster at a time under a fenced lease (``app.reconcilers.runtime``); every write to the row is
fenced on that lease and every write to the host checks it first.

This module reads the cluster and picks the one path its state calls for; the steps live in
modules of their own, top to bottom, and act through one ``ClusterScope`` (``scope.py``: the
conditions, the lease check, fenced writes, the audit trail): ``provision.py`` (an awake
cluster), ``host_objects.py`` (NamespaceReady, QuotaApplied, NetworkPolicyApplied,
QueuesApplied), then ReleaseInstalled (helm) and Ready (Secret ``vc-<release>`` exists and
``/readyz`` answers through it), ``addons.py``, ``sleeping.py`` and ``deletion.py``. The
conditions are saved together, before helm runs (so the tenant follows a long install) and at
the end of the reconcile. A cluster writes only its own objects: its tenant's queue and its
host's root queue and guards have kinds of their own (``tenant_queues.py``,
``platform_objects.py``), which it waits for.

Cost: a cluster still converged at its last generation is only read, and what it reads is
compared by value where the server rewrites it (resource quantities come back in canonical
form). Its objects are read from a list cache (``app.kube.cache``): each kind the portal labels
is LISTed once across all namespaces, and the snapshot serves every cluster for
``CACHE_SECONDS``. Only the Secret ``vc-<release>`` (the chart's, not labelled by the portal) is
a GET per cluster, plus ``/readyz``. Conditions are written only when they change, so an
unchanged cluster costs no Kubernetes writes.

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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn

from sqlalchemy.orm import Session

from app.clusters import conditions as cond
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
from app.kube.manifests import InvalidSpec
from app.kube.port import KubePort
from app.reconcilers.clusters import deletion, provision, sleeping
from app.reconcilers.clusters.results import NO_HOST_MESSAGE, Host, Pass
from app.reconcilers.clusters.scope import ClusterScope, Collaborators
from app.reconcilers.host_keys import host_share
from app.reconcilers.kind import (
    GONE,
    Context,
    HostUnreachable,
    Outcome,
    RetryLater,
    TerminalError,
)
from app.workqueue import CLUSTERS

log = logging.getLogger(__name__)

WAIT_SECONDS = 3.0
# How old the list cache's snapshot may be when it serves an unchanged cluster.
CACHE_SECONDS = 10.0
_ADMISSION = "admissionregistration.k8s.io/v1"
CACHED_KINDS = (("v1", "Namespace"), ("v1", "ResourceQuota"), ("v1", "LimitRange"),
                ("networking.k8s.io/v1", "NetworkPolicy"),
                (manifests.labels.KAI_API_VERSION, "Queue"),
                (_ADMISSION, "ValidatingAdmissionPolicy"),
                (_ADMISSION, "ValidatingAdmissionPolicyBinding"))


@dataclass(frozen=True)
class Loaded:
    """What a reconcile read of its cluster before touching the host."""

    wanted: desired.DesiredCluster | None
    invalid: tuple[int, list[dict[str, object]], str] | None
    failed_attempts: int
    observed_generation: int
    host_id: int
    target: HostTarget | None


class ClusterReconciler:
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

    def collaborators(self) -> Collaborators:
        return Collaborators(settings=self.settings, database=self.database,
                             connector=self.connector, clock=self.clock, box=self.box,
                             wait_seconds=self.wait_seconds, cache=self.cache)

    def reconcile(self, key: str, context: Context) -> Outcome:
        loaded = self._load(int(key))
        if loaded is None:
            return GONE
        if loaded.wanted is None:
            assert loaded.invalid is not None
            return self._mark_invalid(int(key), context, *loaded.invalid)
        # A host with its share of the pool busy (slow, or long helm runs): the clusters of
        # other hosts go first.
        with host_share(context, loaded.host_id):
            scope = self._scope(loaded, context)
            return _to_outcome(scope, _run(scope))

    def _scope(self, loaded: Loaded, context: Context) -> ClusterScope:
        assert loaded.wanted is not None
        target = loaded.target
        where = Host(loaded.host_id, target.name if target else f"#{loaded.host_id}",
                     self.port(target), self.installer_for(target),
                     target is None or routed(target))
        return ClusterScope(self.collaborators(), loaded.wanted, context, where,
                            loaded.failed_attempts, loaded.observed_generation)

    def _load(self, cluster_id: int) -> Loaded | None:
        with self.database.transaction() as db:
            cluster = db.get(VirtualCluster, cluster_id)
            if cluster is None:
                return None
            target = self.target(db, cluster.host_cluster_id)
            try:
                wanted, invalid = desired.load(db, cluster, self.settings), None
            except InvalidSpec as error:
                wanted = None
                invalid = (cluster.generation, list(cluster.conditions or []), str(error))
            return Loaded(wanted, invalid, cluster.failed_attempts, cluster.observed_generation,
                          cluster.host_cluster_id, target)

    def _mark_invalid(self, cluster_id: int, context: Context, generation: int,
                      conditions: list[dict[str, Any]], message: str) -> NoReturn:
        """A row the builders refuse (e.g. a name clash with the KAI root queue): tell the
        tenant."""
        updated = cond.set_condition(conditions, cond.FAILED, True, "InvalidSpec", message,
                                     generation, self.clock())
        if updated != conditions:
            with self.database.transaction() as db:
                context.lease.fence(db)
                repository.update_status(db, cluster_id, conditions=updated,
                                         updated_at=self.clock())
        raise TerminalError(f"InvalidSpec: {message}")


def _run(scope: ClusterScope) -> Pass:
    """One pass: the one path the cluster's state calls for, then its conditions saved."""
    outcome = _path(scope)
    if outcome.reached:
        scope.context.hosts.reached(scope.where.id)
        if cond.find(scope.conditions, cond.HOST_REACHABLE) is not None:
            scope.set(cond.HOST_REACHABLE, True, "HostReachable",
                      f"host cluster {scope.where.name} answers")
    if not outcome.deleted:
        scope.finish(outcome)
    return outcome


def _path(scope: ClusterScope) -> Pass:
    if scope.where.port is None:
        return _no_host(scope)
    down_until = scope.context.hosts.open_until(scope.where.id)
    if down_until is not None:
        # The host failed moments ago: no call to it until its backoff ends.
        return scope.unreachable(down_until)
    if scope.wanted.deleting:
        return deletion.delete(scope)
    if scope.wanted.asleep:
        return sleeping.sleep(scope)
    return provision.provision(scope)


def _no_host(scope: ClusterScope) -> Pass:
    if scope.wanted.deleting:
        return deletion.delete(scope)
    scope.set(cond.READY, False, "HostClusterNotConfigured", NO_HOST_MESSAGE)
    return Pass(reached=False)


def _to_outcome(scope: ClusterScope, outcome: Pass) -> Outcome:
    """What the runtime is told: a failure as the error that schedules its retry."""
    failure = outcome.failure
    if outcome.deleted:
        return GONE
    if failure is not None and failure.unreachable:
        raise HostUnreachable(scope.where.id, failure.message)
    if failure is not None and failure.permanent:
        raise TerminalError(failure.message)
    if failure is not None:
        raise RetryLater(failure.message, delay=failure.delay)
    return Outcome(requeue_after=0.0 if scope.respec else outcome.next_in)
