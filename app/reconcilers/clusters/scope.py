"""What a cluster's steps act through: the reconciler's collaborators as one frozen value, and
the one pass's scope (its conditions, the lease check, fenced writes and the audit trail)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from app.audit import readable
from app.audit import service as audit
from app.clusters import conditions as cond
from app.clusters import repository
from app.clusters.desired import DesiredCluster
from app.database.core import Database
from app.kit.config import Settings
from app.kit.crypto import SecretBox
from app.kube.cache import ListCache
from app.kube.connector import KubeConnector
from app.kube.errors import KubeError
from app.kube.port import KubePort
from app.reconcilers.clusters.results import ACTOR, Failure, Host, Pass, classify
from app.reconcilers.host_keys import unreachable
from app.reconcilers.kind import Context
from app.reconcilers.leases import LeaseLost

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Collaborators:
    """What the reconciler lends every pass: read, never reached back through."""

    settings: Settings
    database: Database
    connector: KubeConnector
    clock: Callable[[], datetime]
    box: SecretBox
    # How soon a cluster waiting on its host (a control plane starting) is looked at again.
    wait_seconds: float
    # The list cache over one host, when the cache is on.
    cache: Callable[[int, KubePort], ListCache | None]


class ClusterScope:
    """One pass over one cluster: what its steps read and the only way they write."""

    def __init__(self, deps: Collaborators, wanted: DesiredCluster, context: Context,
                 where: Host, failed_attempts: int, observed_generation: int) -> None:
        self.deps = deps
        self.wanted = wanted
        self.context = context
        self.where = where
        self.failed_attempts = failed_attempts
        self.observed_generation = observed_generation
        self.conditions = list(wanted.conditions)
        # Conditions set but not yet saved, and when they last changed: saved together before
        # a long step (helm) and at the end of the pass.
        self.unsaved: datetime | None = None
        # The virtual cluster's admin kubeconfig once it answers, for installing add-ons.
        self.kubeconfig: str | None = None
        # The release had vanished and was installed again: its add-ons went with it.
        self.reinstalled = False
        # The spec changed while this pass ran: look again at once.
        self.respec = False
        # Converged at this generation last time: read and compare before any write.
        self.steady = observed_generation == wanted.generation and all(
            _current(wanted.conditions, t, wanted.generation)
            for t in (*cond.STEP_TYPES, cond.READY))

    @property
    def host(self) -> KubePort:
        assert self.where.port is not None
        return self.where.port

    @property
    def cache(self) -> ListCache | None:
        return self.deps.cache(self.where.id, self.host)

    def now(self) -> datetime:
        return self.deps.clock()

    def check_lease(self) -> None:
        """Before a write to the host: stop if another worker has taken the cluster."""
        self.context.lease.check()

    # ----- conditions

    def set(self, type_: str, status: bool, reason: str, message: str) -> None:
        updated = cond.set_condition(self.conditions, type_, status, reason, message,
                                     self.wanted.generation, self.now())
        if updated != self.conditions:
            self.conditions = updated
            self.unsaved = self.now()

    def drop(self, type_: str) -> None:
        """The condition no longer applies (an add-on removed)."""
        if cond.find(self.conditions, type_) is not None:
            self.conditions = cond.remove_condition(self.conditions, type_)
            self.unsaved = self.now()

    def failed(self, type_: str, error: Exception) -> Pass:
        """A step failed: its condition and Ready say why, and how the pass ends."""
        if isinstance(error, KubeError) and unreachable(error):
            return self.unreachable(None, error)
        reason, message, permanent, delay = classify(error)
        self.set(type_, False, reason, message)
        if type_ != cond.READY:
            self.set(cond.READY, False, reason, f"{type_}: {message}")
        log.info("cluster %d: %s failed (%s, attempt %d): %s", self.wanted.cluster_id, type_,
                 reason, self.context.attempts + 1, message)
        if permanent:
            self.set(cond.FAILED, True, reason, message)
            return Pass(failure=Failure(f"{type_}: {message}", permanent=True))
        return Pass(failure=Failure(f"{type_}: {message}", delay=delay))

    def unreachable(self, until: datetime | None, error: KubeError | None = None) -> Pass:
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
        wait = max((until - self.now()).total_seconds(), self.deps.wait_seconds)
        return Pass(next_in=wait, reached=False)

    # ----- writes to the row, fenced on the lease

    def unsaved_conditions(self) -> dict[str, Any]:
        if self.unsaved is None:
            return {}
        return {"conditions": self.conditions, "updated_at": self.unsaved}

    def save_conditions(self) -> None:
        if self.unsaved is None:
            return
        with self.deps.database.transaction() as db:
            self.write(db, **self.unsaved_conditions())
        self.unsaved = None

    def write(self, db: Session, **values: Any) -> None:
        """Writes to the held cluster, fenced on the lease."""
        self.context.lease.fence(db)
        if not repository.update_status(db, self.wanted.cluster_id, **values):
            raise LeaseLost  # the row went: whoever deleted it holds the cluster now

    def audit(self, db: Session, action: str, before: dict[str, Any] | None,
              after: dict[str, Any] | None) -> None:
        audit.record(db, action=action, actor_id=None, actor_label=ACTOR,
                     tenant_id=self.wanted.tenant_id, target_type="virtual_cluster",
                     target_id=self.wanted.cluster_id,
                     target_label=readable.cluster_label(self.wanted.spec.name),
                     before=before, after=after)

    def finish(self, outcome: Pass) -> None:
        """The pass's end: its conditions, attempts and observed generation in one write,
        audited where the cluster became ready or failed."""
        values = self._ending(outcome)
        became_ready = "observed_generation" in values and cond.is_true(self.conditions,
                                                                        cond.READY)
        newly_failed = cond.is_true(self.conditions, cond.FAILED) and not cond.is_true(
            self.wanted.conditions, cond.FAILED)
        with self.deps.database.transaction() as db:
            if values:
                self.write(db, **values)
            if became_ready:
                # Whether it was ready already (a resize): "Ready" is told on becoming ready.
                self.audit(db, "virtual_cluster.ready", None,
                           {"generation": self.wanted.generation,
                            "was_ready": cond.is_true(self.wanted.conditions, cond.READY)})
            if newly_failed:
                failed = cond.find(self.conditions, cond.FAILED) or {}
                self.audit(db, "virtual_cluster.failed", None,
                           {"reason": failed.get("reason"), "message": failed.get("message")})
            self.respec = repository.generation_of(db, self.wanted.cluster_id) not in (
                None, self.wanted.generation)
        self.unsaved = None

    def _ending(self, outcome: Pass) -> dict[str, Any]:
        values: dict[str, Any] = {}
        attempts = self.failed_attempts + 1 if outcome.failure is not None else 0
        if attempts != self.failed_attempts:
            values["failed_attempts"] = attempts
        # A cluster put to sleep has converged too, but is not ready.
        if outcome.converged and self.observed_generation != self.wanted.generation:
            values["observed_generation"] = self.wanted.generation
        values.update(self.unsaved_conditions())
        return values


def _current(conditions: list[dict[str, Any]], type_: str, generation: int) -> bool:
    found = cond.find(conditions, type_)
    return found is not None and found.get("status") == "True" and (
        found.get("observedGeneration") == generation)
