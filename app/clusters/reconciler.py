"""The virtual cluster reconciler: makes the host cluster match each cluster row.

Level-triggered and idempotent: every pass reads the desired state from the database and the
actual state from Kubernetes, and applies only what differs. Leases keep one cluster with one
worker (``repository.claim_due``); every progress write checks the lease is still held.

Steps, each setting its condition: NamespaceReady, QuotaApplied (ResourceQuota, LimitRange),
NetworkPolicyApplied, QueuesApplied (KAI queues and the queue guard), ReleaseInstalled (helm),
then Ready (Secret ``vc-<release>`` exists and ``/readyz`` answers through it). The conditions
are saved together, before helm runs (so the tenant follows a long install) and at the end of
the pass: one write where there was one per step.

Cost: a cluster still converged at its last generation is only read, and what it reads is
compared by value where the server rewrites it (resource quantities come back in canonical
form). Its objects are read from a list cache (``app.kube.cache``): each kind the portal labels
is LISTed once across all namespaces, and the snapshot serves every cluster for
``CACHE_SECONDS``, so drift made by hand is still repaired by the next resync that follows it.
Only the Secret ``vc-<release>`` (the chart's, not labelled by the portal) is a GET per cluster,
plus ``/readyz``. Objects shared by many clusters (root and tenant queues, the queue guard) are
checked once per pass. Conditions are written only when they change, so an unchanged cluster
costs no Kubernetes writes and no writes to its state; the lease bookkeeping is all.

Concurrency: a pass reconciles up to ``PORTAL_WORKER_CONCURRENCY`` clusters at once on a thread
pool, claiming more as threads free up; every Kubernetes call goes through the host adapter's
one token bucket, so the worker as a whole keeps to ``PORTAL_KUBE_QPS``/``BURST``.

Leases are short (``PORTAL_WORKER_LEASE_SECONDS``) and renewed by a heartbeat while the worker
holds them, through helm runs too (``app.reconcilers.leases``). Each claim has its own token;
every write to the cluster's row is conditional on it, and a worker whose renewal found the
lease taken makes no further Kubernetes writes for that cluster.

Errors: transient ones (429, 5xx, 409, connection trouble, helm failures) are retried with
exponential backoff and jitter (at least the server's Retry-After); permanent ones set the
Failed condition, whose reason the tenant sees, and are retried at the resync interval in case
an operator fixed the cause. A worker that dies keeps its leases until they run out (one lease,
no longer: nothing renews them); the cluster is then due again and the next worker adopts what
exists (names are deterministic).
"""

from __future__ import annotations

import base64
import binascii
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.clusters import conditions as cond
from app.clusters import desired, events, repository, team_queues
from app.clusters.desired import DesiredCluster
from app.clusters.installer import HelmInstaller, Installer, InstallError
from app.clusters.models import VirtualCluster
from app.clusters.shapes import ClusterAddon
from app.database.core import Database, utcnow
from app.hosts import repository as hosts_repository
from app.hosts import service as hosts_service
from app.hosts.webhook_route import routed
from app.kit.config import Settings
from app.kit.crypto import SecretBox
from app.kube import manifests, quantities
from app.kube.cache import ListCache
from app.kube.connector import HostTarget, KubeConnector, for_host
from app.kube.errors import KubeError, TransientKubeError
from app.kube.port import KubePort, Manifest, ObjectRef
from app.kube.retry import RetryPolicy
from app.reconcilers.leases import HeldLeases

log = logging.getLogger(__name__)

ACTOR = "cluster-reconciler"
# A pass claims at most this many clusters, and stops claiming after PASS_SECONDS, so the
# worker's other reconcilers get their turn.
BATCH = 200
PASS_SECONDS = 5.0
WAIT_SECONDS = 3.0
# How old the list cache's snapshot may be when it serves an unchanged cluster.
CACHE_SECONDS = 10.0
_ADMISSION = "admissionregistration.k8s.io/v1"
CACHED_KINDS = (("v1", "Namespace"), ("v1", "ResourceQuota"), ("v1", "LimitRange"),
                ("networking.k8s.io/v1", "NetworkPolicy"),
                (manifests.labels.KAI_API_VERSION, "Queue"),
                (_ADMISSION, "ValidatingAdmissionPolicy"),
                (_ADMISSION, "ValidatingAdmissionPolicyBinding"))
BACKOFF = RetryPolicy(base_delay=2.0, max_delay=300.0)
HOST_BACKOFF = RetryPolicy(base_delay=2.0, max_delay=60.0)
# What a client says when nothing answers at the host's address.
UNREACHABLE_REASONS = ("ConnectionError",)
NO_HOST_MESSAGE = (
    "No host cluster is configured (set PORTAL_KUBECONFIG, or run the portal in the host "
    "cluster). The cluster page shows the objects and vcluster.yaml the worker will apply."
)


class LeaseLost(Exception):
    """Another worker holds the cluster now; this one stops touching it."""


@dataclass(frozen=True)
class Outcome:
    next_in: float
    converged: bool = False
    failed: bool = False
    deleted: bool = False
    # The host answered during the run.
    reached: bool = True


@dataclass(frozen=True)
class _Host:
    """The host cluster one reconcile works on: its client and its helm."""

    id: int
    name: str
    port: KubePort | None
    installer: Installer
    # Its API server can reach the admission webhook (app/hosts/webhook_route.py).
    webhook: bool = True


class HostReachability:
    """Which hosts failed to answer, and until when the reconciler leaves them alone.

    Per host, not per cluster: the first cluster that finds its host gone marks it, and the
    others on it wait for the host's backoff (growing with each failed probe, up to
    ``HOST_BACKOFF.max_delay``) instead of each retrying on its own. When the backoff ends,
    the next cluster reconciled there is the probe."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self.clock = clock
        self._down: dict[int, tuple[datetime, int]] = {}
        self._lock = threading.Lock()

    def down_until(self, host_id: int) -> datetime | None:
        with self._lock:
            found = self._down.get(host_id)
        return found[0] if found is not None and found[0] > self.clock() else None

    def failed(self, host_id: int) -> datetime:
        with self._lock:
            _, failures = self._down.get(host_id, (self.clock(), 0))
            failures += 1
            until = self.clock() + timedelta(seconds=HOST_BACKOFF.backoff(min(failures, 20)))
            self._down[host_id] = (until, failures)
        log.warning("host cluster %d: unreachable (%d in a row); backing off until %s",
                    host_id, failures, until.isoformat())
        return until

    def reached(self, host_id: int) -> None:
        with self._lock:
            if self._down.pop(host_id, None) is not None:
                log.info("host cluster %d: reachable again", host_id)


class ClusterReconciler:
    name = "clusters"

    def __init__(
        self,
        settings: Settings,
        database: Database,
        connector: KubeConnector,
        installer: Installer | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
        batch: int = BATCH,
        wait_seconds: float = WAIT_SECONDS,
        concurrency: int | None = None,
        list_cache: bool = True,
        pass_seconds: float = PASS_SECONDS,
    ) -> None:
        self.settings = settings
        self.database = database
        self.connector = connector
        self.installer = installer or HelmInstaller.from_settings(settings)
        self.clock = clock
        self.batch = batch
        self.wait_seconds = wait_seconds
        self.pass_seconds = pass_seconds
        self.box = SecretBox.from_settings(settings)
        # A Database bound to one connection (a test's rolled-back transaction) serves one
        # thread at a time: one cluster at once, and the heartbeat takes turns with it. SQLite
        # (the embedded default) has one writer: threads would only queue for it.
        shared = isinstance(database.sessions.kw.get("bind"), Connection)
        single = shared or database.engine.dialect.name == "sqlite"
        self.concurrency = 1 if single else concurrency or settings.worker_concurrency
        self._gate: AbstractContextManager[Any] = threading.Lock() if shared else nullcontext()
        self.list_cache = list_cache
        self._cache_lock = threading.Lock()
        self._caches: dict[int, ListCache] = {}
        # Objects already ensured during a host's pass (shared queues, the queue guard), by
        # host, and a lock per object so that threads sharing one apply it once.
        self.ensured: dict[int, dict[ObjectRef, Manifest]] = {}
        self._ensuring: dict[tuple[int, ObjectRef], threading.Lock] = {}
        self._ensuring_lock = threading.Lock()
        # The leases each host's pass holds, renewed by their heartbeat; the last one begun
        # as ``leases`` (one host: the pass's).
        self.leases: HeldLeases | None = None
        self._leases_of: dict[int, HeldLeases] = {}
        self._leases_lock = threading.Lock()
        self.hosts = HostReachability(clock)
        # Threaded: one pass per host at a time, each in its own thread, so that a host that
        # answers slowly (or not at all) holds up only its own clusters.
        self._loops: dict[int, threading.Thread] = {}
        self._finished = 0
        self._loops_lock = threading.Lock()

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self.settings.worker_lease_seconds)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        with self._gate, self.database.transaction() as db:
            yield db

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

    def run_due(self, worker_id: str) -> int:
        """Claims due clusters and reconciles them, host by host: up to ``concurrency`` at
        once on each host, until none is due there, ``batch`` were handled or ``pass_seconds``
        have passed. Threaded, each host's pass runs in a thread of its own and this returns
        after at most ``pass_seconds``, the passes still running on slow hosts going on."""
        hosts = self._due_hosts()
        if self.concurrency == 1:
            return sum(self._host_pass(worker_id, host) for host in hosts)
        deadline = time.monotonic() + self.pass_seconds
        with self._loops_lock:
            for host in hosts:
                loop = self._loops.get(host)
                if loop is None or not loop.is_alive():
                    loop = threading.Thread(target=self._host_loop, args=(worker_id, host),
                                            name=f"clusters-host-{host}", daemon=True)
                    self._loops[host] = loop
                    loop.start()
            running = list(self._loops.values())
        for loop in running:
            loop.join(max(0.0, deadline - time.monotonic()))
        with self._loops_lock:
            handled, self._finished = self._finished, 0
        return handled

    def _due_hosts(self) -> list[int]:
        with self.transaction() as db:
            return repository.hosts_with_due_clusters(db, self.clock())

    def _host_loop(self, worker_id: str, host_id: int) -> None:
        try:
            handled = self._host_pass(worker_id, host_id)
        except Exception:
            log.exception("host cluster %d: pass failed", host_id)
            handled = 0
        with self._loops_lock:
            self._finished += handled

    def _host_pass(self, worker_id: str, host_id: int) -> int:
        self.ensured[host_id] = {}
        with self._ensuring_lock:
            self._ensuring = {key: lock for key, lock in self._ensuring.items()
                              if key[0] != host_id}
        heartbeat = self.lease.total_seconds() / 3
        with HeldLeases(self.renew_leases, heartbeat, name=f"clusters-{host_id}") as leases:
            self.leases = leases
            return self._pass(worker_id, host_id, leases)

    def _pass(self, worker_id: str, host_id: int, leases: HeldLeases) -> int:
        started = time.monotonic()
        handled = 0
        with _Runner(self.concurrency) as runner:
            while handled < self.batch and time.monotonic() - started < self.pass_seconds:
                if runner.free() == 0:
                    runner.wait_one()
                    continue
                claimed = self._claim(worker_id, host_id,
                                      min(runner.free(), self.batch - handled))
                if not claimed:
                    if not runner.busy():
                        break
                    runner.wait_one()  # a cluster it finishes may be due again at once
                    continue
                for cluster_id, token in claimed:
                    leases.add(cluster_id, token)
                    with self._leases_lock:
                        self._leases_of[cluster_id] = leases
                    runner.submit(self._reconcile_held, cluster_id, token)
                handled += len(claimed)
        return handled

    def _claim(self, worker_id: str, host_id: int, limit: int) -> list[tuple[int, str]]:
        # Each claim gets its own token: a later claim of the same cluster, even by this
        # worker, fences off whoever still works on the earlier one.
        token = f"{worker_id[:90]}/{secrets.token_hex(4)}"
        now = self.clock()
        with self.transaction() as db:
            claimed = repository.claim_due(db, token, now, now + self.lease, limit,
                                           host_cluster_id=host_id)
        return [(cluster_id, token) for cluster_id in claimed]

    def renew_leases(self, held: Mapping[int, str]) -> set[int]:
        """The heartbeat: stretches the leases still held; the ids it returns are still ours."""
        until = self.clock() + self.lease
        with self.transaction() as db:
            return repository.renew_leases(db, held, until)

    def _reconcile_held(self, cluster_id: int, token: str) -> None:
        try:
            self.reconcile(cluster_id, token)
        except Exception:
            # One cluster's failure must not stop the others; its lease runs out and the
            # cluster is due again.
            log.exception("cluster %d: reconcile failed", cluster_id)
        finally:
            self.stop_renewing(cluster_id)
            with self._leases_lock:
                self._leases_of.pop(cluster_id, None)

    @contextmanager
    def ensuring(self, host_id: int, ref: ObjectRef) -> Iterator[None]:
        """One thread at a time ensures an object."""
        with self._ensuring_lock:
            lock = self._ensuring.setdefault((host_id, ref), threading.Lock())
        with lock:
            yield

    def _leases_for(self, cluster_id: int) -> HeldLeases | None:
        with self._leases_lock:
            return self._leases_of.get(cluster_id)

    def stop_renewing(self, cluster_id: int) -> None:
        """The run is about to end the lease (or delete the row): the heartbeat lets go first,
        so that it never mistakes the ended lease for one another worker took."""
        leases = self._leases_for(cluster_id)
        if leases is not None:
            leases.release(cluster_id)

    def lease_lost(self, cluster_id: int) -> bool:
        leases = self._leases_for(cluster_id)
        return leases is not None and leases.lost(cluster_id)

    def reconcile(self, cluster_id: int, worker_id: str) -> None:
        """One pass over a cluster whose lease ``worker_id`` (the claim's token) holds."""
        with self.transaction() as db:
            cluster = db.get(VirtualCluster, cluster_id)
            if cluster is None or cluster.lease_owner != worker_id:
                return
            state = (cluster.failed_attempts, cluster.observed_generation)
            host_id = cluster.host_cluster_id
            target = self.target(db, host_id)
            try:
                wanted = desired.load(db, cluster, self.settings)
            except ValueError as error:
                wanted = None
                invalid = (cluster.generation, list(cluster.conditions or []), str(error))
        try:
            if wanted is None:
                _InvalidSpec(self, cluster_id, worker_id, *invalid).run()
            else:
                where = _Host(host_id, target.name if target else f"#{host_id}",
                              self.port(target), self.installer_for(target),
                              target is None or routed(target))
                ClusterRun(self, wanted, worker_id, *state, where).run()
        except LeaseLost:
            log.warning("cluster %d: lease lost to another worker; stopping", cluster_id)


class ClusterRun:
    """One reconcile of one cluster: the steps, the conditions written as they change."""

    def __init__(self, owner: ClusterReconciler, wanted: DesiredCluster, worker_id: str,
                 failed_attempts: int, observed_generation: int, where: _Host) -> None:
        self.owner = owner
        self.where = where
        self.wanted = wanted
        self.worker_id = worker_id
        self.failed_attempts = failed_attempts
        self.observed_generation = observed_generation
        self.conditions = list(wanted.conditions)
        # Conditions set but not yet saved, and when they last changed: saved together before
        # a long step (helm) and at the end of the pass.
        self.unsaved: datetime | None = None
        self.secret: Manifest | None = None
        # The virtual cluster's admin kubeconfig once it answers, for installing add-ons.
        self.kubeconfig: str | None = None
        # The release had vanished and was installed again: its add-ons went with it.
        self.reinstalled = False
        # Converged at this generation last time: read and compare before any write.
        self.steady = observed_generation == wanted.generation and all(
            _current(wanted.conditions, t, wanted.generation) for t in (*cond.STEP_TYPES,
                                                                      cond.READY))

    @property
    def host(self) -> KubePort:
        assert self.where.port is not None
        return self.where.port

    def run(self) -> None:
        down_until = self.owner.hosts.down_until(self.where.id)
        if self.where.port is None:
            outcome = self._no_host()
        elif down_until is not None:
            # The host failed moments ago: no call to it until its backoff ends.
            outcome = self._unreachable(down_until)
        elif self.wanted.deleting:
            outcome = self._delete()
        else:
            outcome = self._provision()
        if outcome.reached:
            self.owner.hosts.reached(self.where.id)
            if cond.find(self.conditions, cond.HOST_REACHABLE) is not None:
                self._set(cond.HOST_REACHABLE, True, "HostReachable",
                          f"host cluster {self.where.name} answers")
        if not outcome.deleted:
            self._finish(outcome)

    def _no_host(self) -> Outcome:
        if self.wanted.deleting:
            return self._delete()
        self._set(cond.READY, False, "HostClusterNotConfigured", NO_HOST_MESSAGE)
        return Outcome(next_in=self.owner.settings.worker_resync_seconds, reached=False)

    def _unreachable(self, until: datetime, error: KubeError | None = None) -> Outcome:
        """The host does not answer: every condition stays as last known, HostReachable says
        why, nothing is deleted; the cluster is looked at again when the host's backoff ends."""
        self.conditions = list(self.wanted.conditions)
        self.unsaved = None
        detail = f": {error.message}" if error is not None else ""
        self._set(cond.HOST_REACHABLE, False, cond.HOST_UNREACHABLE,
                  f"host cluster {self.where.name} cannot be reached{detail}; the cluster "
                  "keeps its last known state and is checked again when the host answers")
        wait = max((until - self.owner.clock()).total_seconds(), self.owner.wait_seconds)
        return Outcome(next_in=wait, failed=error is not None, reached=False)

    # ----- provisioning

    def _admission(self) -> None:
        """Shared-pool pods on the open-source vCluster get their KAI queue from the portal's
        webhook, and a hardened cluster's pods their hardening; where the host's API server
        has no way to it, the queue guard and the hardening guard refuse such pods (they never
        run outside the queue, nor unhardened): the cluster says so until the host gets a URL."""
        spec = self.wanted.spec
        shared = spec.placement == "shared-pool" and self.owner.settings.vcluster_edition == "oss"
        hardened = manifests.hardening_level(spec.pod_security, spec.user_namespaces)
        if (shared or hardened) and not self.where.webhook:
            self._set(cond.POD_ADMISSION, False, cond.NO_WEBHOOK_URL,
                      cond.no_webhook_message(self.where.name, shared, hardened))
        elif cond.find(self.conditions, cond.POD_ADMISSION) is not None:
            self._set(cond.POD_ADMISSION, True, "WebhookURLSet",
                      f"host cluster {self.where.name} calls the portal's admission webhook")

    def _provision(self) -> Outcome:
        self._admission()
        steps: list[tuple[str, Callable[[], tuple[str, str]]]] = [
            (cond.NAMESPACE_READY, self._namespace),
            (cond.QUOTA_APPLIED, self._quota),
            (cond.NETWORK_POLICY_APPLIED, self._network_policies),
            (cond.QUEUES_APPLIED, self._queues),
            (cond.RELEASE_INSTALLED, self._release),
        ]
        for type_, step in steps:
            try:
                reason, message = step()
            except (KubeError, InstallError, ValueError) as error:
                return self._failed(type_, error)
            self._set(type_, True, reason, message)
        try:
            outcome = self._ready()
        except (KubeError, ValueError) as error:
            return self._failed(cond.READY, error)
        return self._addons(outcome) if outcome.converged else outcome

    def _objects(self, *kinds: str) -> list[Manifest]:
        return [obj for obj in self.wanted.host_objects() if obj["kind"] in kinds]

    def _namespace(self) -> tuple[str, str]:
        for live in self._ensure(self._objects("Namespace")):
            if (live.get("metadata") or {}).get("deletionTimestamp"):
                # Deleted behind the portal's back: nothing can be made in it until it is gone,
                # then a pass makes it again, and installs the release that went with it.
                self._set(cond.RELEASE_INSTALLED, False, "NamespaceTerminating",
                          "the release is removed with its namespace")
                raise TransientKubeError(
                    f"namespace {self.wanted.namespace} is being deleted; it is made again "
                    "once it is gone", reason="NamespaceTerminating")
        return "Applied", f"namespace {self.wanted.namespace}"

    def _quota(self) -> tuple[str, str]:
        self._ensure(self._objects("ResourceQuota", "LimitRange"))
        spec = self.wanted.spec
        return "Applied", (f"ResourceQuota: {spec.gpus} GPUs, {spec.cpu_millicores}m CPU, "
                           f"{spec.memory_mib} MiB memory; LimitRange defaults")

    def _network_policies(self) -> tuple[str, str]:
        self._ensure(self._objects("NetworkPolicy"))
        return "Applied", "traffic from other tenants' namespaces is denied"

    def _queues(self) -> tuple[str, str]:
        self._ensure([*manifests.platform_objects(self.wanted.policy), *self._objects("Queue")])
        queue = manifests.cluster_queue_name(self.wanted.spec.tenant, self.wanted.spec.name)
        return "Applied", f"KAI queue {queue} under {self.wanted.tenant.slug}"

    def _ensure(self, objects: list[Manifest]) -> list[Manifest]:
        """Apply what is missing or differs; the live objects it read or wrote."""
        seen = []
        cache = self.owner.cache(self.where.id, self.host)
        ensured = self.owner.ensured.setdefault(self.where.id, {})
        for obj in objects:
            ref = ObjectRef.of(obj)
            with self.owner.ensuring(self.where.id, ref):
                if ensured.get(ref) == obj:
                    continue
                live = self._read(ref, cache) if self.steady else None
                if not self.steady or quantities.drifted(live, obj):
                    self._check_lease()
                    # The portal owns these objects outright: take back fields others set.
                    live = self.host.apply(obj, force=True)
                    if cache is not None:
                        cache.stored(live)
                ensured[ref] = obj
            if live is not None:
                seen.append(live)
        return seen

    def _read(self, ref: ObjectRef, cache: ListCache | None) -> Manifest | None:
        if cache is not None and cache.covers(ref):
            return cache.get(ref)
        return self.host.get(ref.api_version, ref.kind, ref.name, ref.namespace)

    def _check_lease(self) -> None:
        """Before a write to the host: stop if another worker has taken the cluster."""
        if self.owner.lease_lost(self.wanted.cluster_id):
            raise LeaseLost

    def _release(self) -> tuple[str, str]:
        settings = self.owner.settings
        digest = desired.release_digest(self.wanted, settings)
        message = (f"release {self.wanted.release} of chart vcluster "
                   f"{settings.vcluster_chart_version} (values {digest})")
        self.secret = self._kubeconfig_secret()
        current = cond.find(self.conditions, cond.RELEASE_INSTALLED)
        up_to_date = current is not None and current.get("status") == "True" and (
            current.get("message") == message)
        # A release that was ready and lost its Secret was removed behind our back.
        vanished = self.secret is None and cond.is_true(self.conditions, cond.READY)
        if up_to_date and not vanished:
            return "Installed", message
        self.reinstalled = vanished
        # However long helm takes, the heartbeat keeps the lease; the tenant sees the steps
        # so far meanwhile.
        self._check_lease()
        self._save_conditions()
        self.where.installer.install(self.wanted.release, self.wanted.namespace,
                                     self.wanted.values_yaml())
        self._check_lease()
        self.secret = self._kubeconfig_secret()
        return "Installed", message

    def _kubeconfig_secret(self) -> Manifest | None:
        return self.host.get("v1", "Secret", self.wanted.kubeconfig_secret, self.wanted.namespace)

    def _ready(self) -> Outcome:
        wait = Outcome(next_in=self.owner.wait_seconds)
        name = f"Secret {self.wanted.kubeconfig_secret} in {self.wanted.namespace}"
        config = _kubeconfig_of(self.secret) if self.secret is not None else None
        if config is None:
            self._set(cond.READY, False, "WaitingForControlPlane", f"waiting for {name}")
            return wait
        if not self.owner.connector.ready(config):
            self._set(cond.READY, False, "APIServerNotReady",
                      "the virtual cluster's API server does not answer /readyz yet")
            return wait
        self._store_credential(config)
        self.kubeconfig = config
        self._set(cond.READY, True, "ClusterReady", "the API server answers /readyz")
        if cond.find(self.conditions, cond.FAILED) is not None:
            self._set(cond.FAILED, False, "Reconciled", "")
        return Outcome(next_in=self.owner.settings.worker_resync_seconds, converged=True)

    def _store_credential(self, config: str) -> None:
        sealed = self.wanted.sealed_kubeconfig
        if sealed is not None and _opens_to(self.owner.box, sealed, config):
            return
        with self.owner.transaction() as db:
            self._write(db, admin_kubeconfig_encrypted=self.owner.box.seal(config),
                        **self._unsaved_conditions())
            self._audit(db, "virtual_cluster.credential_stored", None,
                        {"credential": "admin kubeconfig stored encrypted"})
        self.unsaved = None

    # ----- add-ons, once the virtual cluster is Ready

    def _addons(self, ready: Outcome) -> Outcome:
        """Install what is missing or changed, uninstall what is no longer wanted; each add-on
        keeps its own condition, and one failing retries with backoff without holding up the
        others or the cluster's Ready."""
        wanted = {addon.name: addon for addon in self.wanted.addons}
        failures = [self._addon_step(cond.addon_type(addon.name), self._install_addon, addon)
                    for addon in wanted.values()]
        failures += [self._addon_step(cond.addon_type(name), self._uninstall_addon, name)
                     for name in cond.addon_names(self.conditions) if name not in wanted]
        failures.append(self._addon_step(cond.TEAM_QUEUES, self._team_queues, None))
        failed = [f for f in failures if f is not None]
        if not failed:
            return ready
        if all(permanent for permanent, _ in failed):
            return Outcome(next_in=self.owner.settings.worker_resync_seconds, converged=True,
                           failed=True)
        attempt = min(self.failed_attempts + 1, 20)
        delay = max([BACKOFF.backoff(attempt), *(d for p, d in failed if not p)])
        return Outcome(next_in=delay, converged=True, failed=True)

    def _addon_step(self, type_: str, step: Callable[[Any], None],
                    subject: Any) -> tuple[bool, float] | None:
        """Runs one add-on's install or uninstall; (permanent, server's delay) if it failed."""
        try:
            step(subject)
        except (InstallError, KubeError) as error:
            reason, message, permanent, delay = _classify(error)
            self._set(type_, False, reason, message)
            log.info("cluster %d: %s failed (%s): %s", self.wanted.cluster_id, type_, reason,
                     message)
            return permanent, delay or 0.0
        return None

    def _install_addon(self, addon: ClusterAddon) -> None:
        type_ = cond.addon_type(addon.name)
        message = (f"{addon.chart} {addon.version} from {addon.repo} "
                   f"(values {desired.addon_digest(addon)})")
        current = cond.find(self.conditions, type_)
        if current is not None and current.get("status") == "True" and (
                current.get("message") == message) and not self.reinstalled:
            return
        if current is None:
            self._set(type_, False, "Installing", message)
        assert self.kubeconfig is not None
        self._check_lease()
        self._save_conditions()
        self.where.installer.install_addon(addon, self.kubeconfig)
        self._check_lease()
        self._set(type_, True, "Installed", message)

    def _uninstall_addon(self, name: str) -> None:
        assert self.kubeconfig is not None
        self._check_lease()
        self._save_conditions()
        self.where.installer.uninstall_addon(name, self.kubeconfig)
        self._check_lease()
        self.conditions = cond.remove_condition(self.conditions, cond.addon_type(name))
        self.unsaved = self.owner.clock()

    def _team_queues(self, _: None) -> None:
        """KAI inside a dedicated-nodes cluster: its parent and team queues, once KAI is Ready."""
        kai = self.wanted.kai_addon
        if kai is None:
            if cond.find(self.conditions, cond.TEAM_QUEUES) is not None:
                self.conditions = cond.remove_condition(self.conditions, cond.TEAM_QUEUES)
                self.unsaved = self.owner.clock()
            return
        if not cond.is_true(self.conditions, cond.addon_type(kai.name)):
            self._set(cond.TEAM_QUEUES, False, "WaitingForAddon",
                      f"the team queues are made once add-on {kai.name} is installed")
            return
        wanted = self.wanted.team_queues()
        assert self.kubeconfig is not None
        self._check_lease()
        port = self.owner.connector.virtual(self.kubeconfig)
        try:
            team_queues.ensure(port, wanted)
        finally:
            # A client made for this one pass: its connections are not kept for the next.
            close = getattr(port, "close", None)
            if callable(close):
                close()
        self._set(cond.TEAM_QUEUES, True, "Applied", team_queues.summary(wanted))

    # ----- deletion

    def _delete(self) -> Outcome:
        with self.owner.transaction() as db:
            events.cluster_deleting.fire(db, events.ClusterDeleting(self.wanted.cluster_id, ACTOR))
        if self.where.port is None:
            if any(cond.find(self.wanted.conditions, t) for t in cond.STEP_TYPES):
                self._set(cond.READY, False, "HostClusterNotConfigured",
                          "cannot remove what was applied while no host cluster is configured")
                return Outcome(next_in=self.owner.settings.worker_resync_seconds)
            return self._remove_row()
        try:
            if not self._take_down():
                self._set(cond.READY, False, "Deleting",
                          f"waiting for namespace {self.wanted.namespace} to terminate")
                return Outcome(next_in=self.owner.wait_seconds)
        except (KubeError, InstallError) as error:
            return self._failed(cond.READY, error)
        return self._remove_row()

    def _take_down(self) -> bool:
        """Uninstall, then delete what the portal made; True once the namespace is gone."""
        spec, namespace = self.wanted.spec, self.wanted.namespace
        self.host.get("v1", "Namespace", namespace)  # the host answers, before helm is run
        self._check_lease()
        self._save_conditions()
        self.where.installer.uninstall(self.wanted.release, namespace)
        self._check_lease()
        queue_version = manifests.labels.KAI_API_VERSION
        doomed = [ObjectRef("v1", "Namespace", namespace),
                  ObjectRef(queue_version, "Queue",
                            manifests.cluster_queue_name(spec.tenant, spec.name))]
        if self.wanted.last_of_tenant:
            doomed.append(ObjectRef(queue_version, "Queue",
                                    manifests.tenant_queue_name(spec.tenant)))
        cache = self.owner.cache(self.where.id, self.host)
        for ref in doomed:
            self.host.delete(ref.api_version, ref.kind, ref.name, ref.namespace)
            if cache is not None:
                cache.forgot(ref)
        return self.host.get("v1", "Namespace", namespace) is None

    def _remove_row(self) -> Outcome:
        self.owner.stop_renewing(self.wanted.cluster_id)
        with self.owner.transaction() as db:
            cluster = repository.lock_cluster(db, self.wanted.cluster_id)
            if cluster is None or cluster.lease_owner != self.worker_id:
                raise LeaseLost
            before = {"name": cluster.name, "gpus": cluster.gpus,
                      "gpu_class_id": cluster.gpu_class_id, "generation": cluster.generation}
            self._audit(db, "virtual_cluster.deleted", before, None)
            events.cluster_row_deleting.fire(db, events.ClusterDeleting(cluster.id, ACTOR))
            repository.delete_cluster_row(db, cluster.id)
        return Outcome(next_in=0, deleted=True)

    # ----- conditions, failures and the lease

    def _failed(self, type_: str, error: Exception) -> Outcome:
        if isinstance(error, TransientKubeError) and error.reason in UNREACHABLE_REASONS:
            return self._unreachable(self.owner.hosts.failed(self.where.id), error)
        reason, message, permanent, delay = _classify(error)
        self._set(type_, False, reason, message)
        if type_ != cond.READY:
            self._set(cond.READY, False, reason, f"{type_}: {message}")
        attempt = self.failed_attempts + 1
        log.info("cluster %d: %s failed (%s, attempt %d): %s", self.wanted.cluster_id, type_,
                 reason, attempt, message)
        if permanent:
            self._set(cond.FAILED, True, reason, message)
            return Outcome(next_in=self.owner.settings.worker_resync_seconds, failed=True)
        return Outcome(next_in=max(delay or 0.0, BACKOFF.backoff(min(attempt, 20))), failed=True)

    def _set(self, type_: str, status: bool, reason: str, message: str) -> None:
        updated = cond.set_condition(self.conditions, type_, status, reason, message,
                                     self.wanted.generation, self.owner.clock())
        if updated == self.conditions:
            return
        self.conditions = updated
        self.unsaved = self.owner.clock()

    def _unsaved_conditions(self) -> dict[str, Any]:
        if self.unsaved is None:
            return {}
        return {"conditions": self.conditions, "updated_at": self.unsaved}

    def _save_conditions(self) -> None:
        if self.unsaved is None:
            return
        with self.owner.transaction() as db:
            self._write(db, **self._unsaved_conditions())
        self.unsaved = None

    def _write(self, db: Any, **values: Any) -> None:
        """Writes to the held cluster; each write also renews the lease."""
        until = self.owner.clock() + self.owner.lease
        values.setdefault("lease_expires_at", until)
        values.setdefault("next_reconcile_at", until)
        if not repository.update_held(db, self.wanted.cluster_id, self.worker_id, **values):
            raise LeaseLost

    def _finish(self, outcome: Outcome) -> None:
        now = self.owner.clock()
        values: dict[str, Any] = {}
        attempts = self.failed_attempts + 1 if outcome.failed else 0
        if attempts != self.failed_attempts:
            values["failed_attempts"] = attempts
        became_ready = outcome.converged and self.observed_generation != self.wanted.generation
        if became_ready:
            values["observed_generation"] = self.wanted.generation
        newly_failed = cond.is_true(self.conditions, cond.FAILED) and not cond.is_true(
            self.wanted.conditions, cond.FAILED)
        values.update(self._unsaved_conditions())
        self.owner.stop_renewing(self.wanted.cluster_id)
        with self.owner.transaction() as db:
            if not repository.release(db, self.wanted.cluster_id, self.worker_id,
                                      generation=self.wanted.generation,
                                      next_at=now + timedelta(seconds=outcome.next_in),
                                      now=now, **values):
                raise LeaseLost
            if became_ready:
                self._audit(db, "virtual_cluster.ready", None,
                            {"generation": self.wanted.generation})
            if newly_failed:
                failed = cond.find(self.conditions, cond.FAILED) or {}
                self._audit(db, "virtual_cluster.failed", None,
                            {"reason": failed.get("reason"), "message": failed.get("message")})

    def _audit(self, db: Any, action: str, before: dict[str, Any] | None,
               after: dict[str, Any] | None) -> None:
        audit.record(db, action=action, actor_id=None, actor_label=ACTOR,
                     tenant_id=self.wanted.tenant_id, target_type="virtual_cluster",
                     target_id=self.wanted.cluster_id, before=before, after=after)


class _InvalidSpec:
    """A row the builders refuse (e.g. a name clash with the KAI root queue): tell the tenant."""

    def __init__(self, owner: ClusterReconciler, cluster_id: int, worker_id: str,
                 generation: int, conditions: list[dict[str, Any]], message: str) -> None:
        self.owner, self.cluster_id, self.worker_id = owner, cluster_id, worker_id
        self.generation, self.conditions, self.message = generation, conditions, message

    def run(self) -> None:
        now = self.owner.clock()
        updated = cond.set_condition(self.conditions, cond.FAILED, True, "InvalidSpec",
                                     self.message, self.generation, now)
        values: dict[str, Any] = {}
        if updated != self.conditions:
            values = {"conditions": updated, "updated_at": now}
        resync = now + timedelta(seconds=self.owner.settings.worker_resync_seconds)
        self.owner.stop_renewing(self.cluster_id)
        with self.owner.transaction() as db:
            if not repository.release(db, self.cluster_id, self.worker_id,
                                      generation=self.generation, next_at=resync, now=now,
                                      **values):
                raise LeaseLost


def _current(conditions: list[dict[str, Any]], type_: str, generation: int) -> bool:
    found = cond.find(conditions, type_)
    return found is not None and found.get("status") == "True" and (
        found.get("observedGeneration") == generation)


def _kubeconfig_of(secret: Manifest) -> str | None:
    encoded = (secret.get("data") or {}).get("config")
    if not encoded:
        return None
    try:
        return base64.b64decode(encoded).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def _opens_to(box: SecretBox, sealed: str, plaintext: str) -> bool:
    try:
        return box.open(sealed) == plaintext
    except ValueError:
        return False


def _classify(error: Exception) -> tuple[str, str, bool, float | None]:
    """(reason, message, permanent, server's delay) of a step's failure."""
    if isinstance(error, TransientKubeError):
        return error.reason, error.message, False, error.delay_seconds
    if isinstance(error, KubeError):
        return error.reason, error.message, True, None
    if isinstance(error, InstallError):
        return error.reason, error.message, error.permanent, None
    return "InvalidSpec", str(error), True, None


class _Runner:
    """Runs reconciles inline, one at a time, or on a pool of ``size`` threads."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.pool = ThreadPoolExecutor(size, thread_name_prefix="cluster") if size > 1 else None
        self.running: set[Future[None]] = set()

    def free(self) -> int:
        return self.size - len(self.running)

    def busy(self) -> bool:
        return bool(self.running)

    def submit(self, work: Callable[[int, str], None], cluster_id: int, token: str) -> None:
        if self.pool is None:
            work(cluster_id, token)
        else:
            self.running.add(self.pool.submit(work, cluster_id, token))

    def wait_one(self) -> None:
        done, pending = wait(self.running, return_when=FIRST_COMPLETED)
        self.running = set(pending)
        for future in done:
            future.result()  # what the work did not catch (a BaseException) goes on up

    def __enter__(self) -> _Runner:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self.pool is None:
            return
        self.pool.shutdown(wait=True)
        if error is None:
            for future in self.running:
                future.result()
