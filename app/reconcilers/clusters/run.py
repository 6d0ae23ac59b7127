"""One reconcile of one cluster: its steps, and the conditions written as they change."""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

from sqlalchemy.orm import Session

from app.audit import readable
from app.audit import service as audit
from app.clusters import conditions as cond
from app.clusters import desired, repository
from app.clusters.desired import DesiredCluster
from app.kit.crypto import SecretBox
from app.kube import manifests, quantities
from app.kube.cache import ListCache
from app.kube.errors import KubeError, TransientKubeError
from app.kube.helm import InstallError
from app.kube.port import KubePort, Manifest, ObjectRef
from app.reconcilers.clusters import addons, deletion, sleeping
from app.reconcilers.clusters.results import (
    ACTOR,
    NO_HOST_MESSAGE,
    Failure,
    Host,
    Pass,
    classify,
)
from app.reconcilers.host_keys import unreachable
from app.reconcilers.kind import (
    GONE,
    Context,
    HostUnreachable,
    Outcome,
    RetryLater,
    TerminalError,
)
from app.reconcilers.leases import LeaseLost

if TYPE_CHECKING:
    from app.reconcilers.clusters.kind import ClusterReconciler

log = logging.getLogger(__name__)


def to_outcome(run: ClusterRun, outcome: Pass) -> Outcome:
    """What the runtime is told: a failure as the error that schedules its retry."""
    failure = outcome.failure
    if outcome.deleted:
        return GONE
    if failure is not None and failure.unreachable:
        raise HostUnreachable(run.where.id, failure.message)
    if failure is not None and failure.permanent:
        raise TerminalError(failure.message)
    if failure is not None:
        raise RetryLater(failure.message, delay=failure.delay)
    return Outcome(requeue_after=0.0 if run.respec else outcome.next_in)


def mark_invalid(owner: ClusterReconciler, cluster_id: int, context: Context, generation: int,
                 conditions: list[dict[str, Any]], message: str) -> NoReturn:
    """A row the builders refuse (e.g. a name clash with the KAI root queue): tell the tenant."""
    updated = cond.set_condition(conditions, cond.FAILED, True, "InvalidSpec", message,
                                 generation, owner.clock())
    if updated != conditions:
        with owner.database.transaction() as db:
            context.lease.fence(db)
            repository.update_status(db, cluster_id, conditions=updated,
                                     updated_at=owner.clock())
    raise TerminalError(f"InvalidSpec: {message}")


class ClusterRun:
    """One reconcile of one cluster: the steps, the conditions written as they change."""

    def __init__(self, owner: ClusterReconciler, wanted: DesiredCluster, context: Context,
                 failed_attempts: int, observed_generation: int, where: Host) -> None:
        self.owner = owner
        self.where = where
        self.wanted = wanted
        self.context = context
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
        # The spec changed while this reconcile ran: look again at once.
        self.respec = False
        # Converged at this generation last time: read and compare before any write.
        self.steady = observed_generation == wanted.generation and all(
            _current(wanted.conditions, t, wanted.generation) for t in (*cond.STEP_TYPES,
                                                                      cond.READY))

    @property
    def host(self) -> KubePort:
        assert self.where.port is not None
        return self.where.port

    def run(self) -> Pass:
        down_until = self.context.hosts.open_until(self.where.id)
        if self.where.port is None:
            outcome = self._no_host()
        elif down_until is not None:
            # The host failed moments ago: no call to it until its backoff ends.
            outcome = self._unreachable(down_until)
        elif self.wanted.deleting:
            outcome = deletion.delete(self)
        elif self.wanted.asleep:
            outcome = sleeping.sleep(self)
        else:
            outcome = self._provision()
        if outcome.reached:
            self.context.hosts.reached(self.where.id)
            if cond.find(self.conditions, cond.HOST_REACHABLE) is not None:
                self.set(cond.HOST_REACHABLE, True, "HostReachable",
                         f"host cluster {self.where.name} answers")
        if not outcome.deleted:
            self._finish(outcome)
        return outcome

    def _no_host(self) -> Pass:
        if self.wanted.deleting:
            return deletion.delete(self)
        self.set(cond.READY, False, "HostClusterNotConfigured", NO_HOST_MESSAGE)
        return Pass(reached=False)

    def _unreachable(self, until: datetime | None, error: KubeError | None = None) -> Pass:
        """The host does not answer: every condition stays as last known, HostReachable says
        why, nothing is deleted; the cluster is looked at again when the host's breaker
        closes (``until``, when it is already open; else the runtime opens it)."""
        self.conditions = list(self.wanted.conditions)
        self.unsaved = None
        detail = f": {error.message}" if error is not None else ""
        self.set(cond.HOST_REACHABLE, False, cond.HOST_UNREACHABLE,
                 f"host cluster {self.where.name} cannot be reached{detail}; the cluster "
                 "keeps its last known state and is checked again when the host answers")
        if error is not None:
            return Pass(failure=Failure(error.message, unreachable=True), reached=False)
        assert until is not None
        wait = max((until - self.owner.clock()).total_seconds(), self.owner.wait_seconds)
        return Pass(next_in=wait, reached=False)

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
            self.set(cond.POD_ADMISSION, False, cond.NO_WEBHOOK_URL,
                     cond.no_webhook_message(self.where.name, shared, hardened))
        elif cond.find(self.conditions, cond.POD_ADMISSION) is not None:
            self.set(cond.POD_ADMISSION, True, "WebhookURLSet",
                     f"host cluster {self.where.name} calls the portal's admission webhook")

    def _provision(self) -> Pass:
        self._admission()
        failed = self.host_steps()
        if failed is not None:
            return failed
        try:
            if self.wanted.slept:
                sleeping.wake(self)
            reason, message = self._release()
        except (KubeError, InstallError, ValueError) as error:
            return self.failed(cond.RELEASE_INSTALLED, error)
        self.set(cond.RELEASE_INSTALLED, True, reason, message)
        try:
            outcome = self._ready()
        except (KubeError, ValueError) as error:
            return self.failed(cond.READY, error)
        if not outcome.converged:
            return outcome
        sleeping.woke(self)
        return addons.converge(self, outcome)

    def host_steps(self) -> Pass | None:
        """The namespace, its quota, network policies and queues, in order; None once all
        are applied, else how the pass ends."""
        steps: list[tuple[str, Callable[[], tuple[str, str]]]] = [
            (cond.NAMESPACE_READY, self._namespace),
            (cond.QUOTA_APPLIED, self._quota),
            (cond.NETWORK_POLICY_APPLIED, self._network_policies),
            (cond.QUEUES_APPLIED, self._queues),
        ]
        for type_, step in steps:
            try:
                reason, message = step()
            except (KubeError, ValueError) as error:
                return self.failed(type_, error)
            self.set(type_, True, reason, message)
        return None

    def fell_asleep(self) -> datetime:
        """When the cluster fell asleep: recorded (and audited) by the pass that saw it."""
        if self.wanted.asleep_since is not None:
            return self.wanted.asleep_since
        since = self.owner.clock()
        with self.owner.database.transaction() as db:
            self.write(db, asleep_since=since)
            self.audit(db, "virtual_cluster.asleep", None,
                       {"since": since.isoformat(), "reason": self.wanted.power_reason})
        return since

    def woke_up(self) -> None:
        with self.owner.database.transaction() as db:
            self.write(db, asleep_since=None)
            self.audit(db, "virtual_cluster.awake", None, {"reason": self.wanted.power_reason})

    def _objects(self, *kinds: str) -> list[Manifest]:
        return [obj for obj in self.wanted.host_objects() if obj["kind"] in kinds]

    def _namespace(self) -> tuple[str, str]:
        for live in self._ensure(self._objects("Namespace")):
            if (live.get("metadata") or {}).get("deletionTimestamp"):
                # Deleted behind the portal's back: nothing can be made in it until it is gone,
                # then a pass makes it again, and installs the release that went with it.
                self.set(cond.RELEASE_INSTALLED, False, "NamespaceTerminating",
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
        spec = self.wanted.spec
        queue = manifests.cluster_queue_name(spec.tenant, spec.name)
        queues = self._objects("Queue")
        # The root and tenant queues and the guards are shared by many clusters.
        self._ensure([*manifests.platform_objects(self.wanted.policy),
                      *(q for q in queues if q["metadata"]["name"] != queue)], shared=True)
        self._ensure([q for q in queues if q["metadata"]["name"] == queue])
        return "Applied", f"KAI queue {queue} under {self.wanted.tenant.slug}"

    def _ensure(self, objects: list[Manifest], *, shared: bool = False) -> list[Manifest]:
        """Apply what is missing or differs; the live objects it read or wrote. An object
        many clusters share is applied once while it stays the same (``SharedObjects``)."""
        seen = []
        cache = self.owner.cache(self.where.id, self.host)
        memo = self.owner.shared
        unique = {ObjectRef.of(obj): obj for obj in objects}
        for ref, obj in unique.items():
            with memo.ensuring(self.where.id, ref):
                if shared and memo.applied(self.where.id, ref, obj):
                    continue
                live = self._read(ref, cache) if self.steady else None
                if not self.steady or quantities.drifted(live, obj):
                    self.check_lease()
                    # The portal owns these objects outright: take back fields others set.
                    live = self.host.apply(obj, force=True)
                    if cache is not None:
                        cache.stored(live)
                if shared:
                    memo.remember(self.where.id, ref, obj)
            if live is not None:
                seen.append(live)
        return seen

    def _read(self, ref: ObjectRef, cache: ListCache | None) -> Manifest | None:
        if cache is not None and cache.covers(ref):
            return cache.get(ref)
        return self.host.get(ref.api_version, ref.kind, ref.name, ref.namespace)

    def check_lease(self) -> None:
        """Before a write to the host: stop if another worker has taken the cluster."""
        self.context.lease.check()

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
        self.check_lease()
        self.save_conditions()
        self.where.installer.install(self.wanted.release, self.wanted.namespace,
                                     self.wanted.values_yaml())
        self.check_lease()
        self.secret = self._kubeconfig_secret()
        return "Installed", message

    def _kubeconfig_secret(self) -> Manifest | None:
        return self.host.get("v1", "Secret", self.wanted.kubeconfig_secret, self.wanted.namespace)

    def _ready(self) -> Pass:
        wait = Pass(next_in=self.owner.wait_seconds)
        name = f"Secret {self.wanted.kubeconfig_secret} in {self.wanted.namespace}"
        config = _kubeconfig_of(self.secret) if self.secret is not None else None
        if config is None:
            self.set(cond.READY, False, "WaitingForControlPlane", f"waiting for {name}")
            return wait
        if not self.owner.connector.ready(config):
            self.set(cond.READY, False, "APIServerNotReady",
                     "the virtual cluster's API server does not answer /readyz yet")
            return wait
        self._store_credential(config)
        self.kubeconfig = config
        self.set(cond.READY, True, "ClusterReady", "the API server answers /readyz")
        if cond.find(self.conditions, cond.FAILED) is not None:
            self.set(cond.FAILED, False, "Reconciled", "")
        return Pass(converged=True)

    def _store_credential(self, config: str) -> None:
        sealed = self.wanted.sealed_kubeconfig
        if sealed is not None and _opens_to(self.owner.box, sealed, config):
            return
        with self.owner.database.transaction() as db:
            self.write(db, admin_kubeconfig_encrypted=self.owner.box.seal(config),
                       **self.unsaved_conditions())
            self.audit(db, "virtual_cluster.credential_stored", None,
                       {"credential": "admin kubeconfig stored encrypted"})
        self.unsaved = None

    # ----- conditions, failures and the lease

    def failed(self, type_: str, error: Exception) -> Pass:
        if isinstance(error, KubeError) and unreachable(error):
            return self._unreachable(None, error)
        reason, message, permanent, delay = classify(error)
        self.set(type_, False, reason, message)
        if type_ != cond.READY:
            self.set(cond.READY, False, reason, f"{type_}: {message}")
        attempt = self.context.attempts + 1
        log.info("cluster %d: %s failed (%s, attempt %d): %s", self.wanted.cluster_id, type_,
                 reason, attempt, message)
        if permanent:
            self.set(cond.FAILED, True, reason, message)
            return Pass(failure=Failure(f"{type_}: {message}", permanent=True))
        return Pass(failure=Failure(f"{type_}: {message}", delay=delay))

    def set(self, type_: str, status: bool, reason: str, message: str) -> None:
        updated = cond.set_condition(self.conditions, type_, status, reason, message,
                                     self.wanted.generation, self.owner.clock())
        if updated == self.conditions:
            return
        self.conditions = updated
        self.unsaved = self.owner.clock()

    def unsaved_conditions(self) -> dict[str, Any]:
        if self.unsaved is None:
            return {}
        return {"conditions": self.conditions, "updated_at": self.unsaved}

    def save_conditions(self) -> None:
        if self.unsaved is None:
            return
        with self.owner.database.transaction() as db:
            self.write(db, **self.unsaved_conditions())
        self.unsaved = None

    def write(self, db: Session, **values: Any) -> None:
        """Writes to the held cluster, fenced on the lease."""
        self.context.lease.fence(db)
        if not repository.update_status(db, self.wanted.cluster_id, **values):
            raise LeaseLost  # the row went: whoever deleted it holds the cluster now

    def _finish(self, outcome: Pass) -> None:
        values: dict[str, Any] = {}
        attempts = self.failed_attempts + 1 if outcome.failure is not None else 0
        if attempts != self.failed_attempts:
            values["failed_attempts"] = attempts
        observed = outcome.converged and self.observed_generation != self.wanted.generation
        if observed:
            values["observed_generation"] = self.wanted.generation
        # A cluster put to sleep has converged too, but is not ready.
        became_ready = observed and cond.is_true(self.conditions, cond.READY)
        newly_failed = cond.is_true(self.conditions, cond.FAILED) and not cond.is_true(
            self.wanted.conditions, cond.FAILED)
        values.update(self.unsaved_conditions())
        with self.owner.database.transaction() as db:
            if values:
                self.write(db, **values)
            if became_ready:
                self.audit(db, "virtual_cluster.ready", None,
                           {"generation": self.wanted.generation})
            if newly_failed:
                failed = cond.find(self.conditions, cond.FAILED) or {}
                self.audit(db, "virtual_cluster.failed", None,
                           {"reason": failed.get("reason"), "message": failed.get("message")})
            self.respec = repository.generation_of(db, self.wanted.cluster_id) not in (
                None, self.wanted.generation)
        self.unsaved = None

    def audit(self, db: Any, action: str, before: dict[str, Any] | None,
               after: dict[str, Any] | None) -> None:
        audit.record(db, action=action, actor_id=None, actor_label=ACTOR,
                     tenant_id=self.wanted.tenant_id, target_type="virtual_cluster",
                     target_id=self.wanted.cluster_id,
                     target_label=readable.cluster_label(self.wanted.spec.name),
                     before=before, after=after)


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
