"""What needs a platform admin now: quota requests waiting, capacity per class, hosts that
fail their checks, clusters that fail or hang while waking. Read from the services and read
models that own each figure, so the home page agrees with the pages it links to."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.authz import ensure_platform_admin
from app.clusters import conditions as cond
from app.fleet import repository
from app.gpu_classes import service as gpu_classes
from app.gpu_classes.schemas import GpuClassOut
from app.hosts import service as hosts
from app.hosts.schemas import HostOut
from app.http.pagination import PageParams
from app.quotas import service as quotas
from app.quotas.schemas import QueueItem
from app.web.times import parse

# A cluster asked to wake longer ago than this is "stuck waking": the simulated host wakes one
# in seconds and a real one in a minute or two.
WAKING_STUCK_AFTER = timedelta(minutes=10)
FAILING_PHASES = ("Failed", "Unreachable")
EVERYTHING = PageParams(limit=200)


@dataclass(frozen=True)
class ClusterTrouble:
    tenant: str
    name: str
    host_cluster: str
    phase: str  # Failed, Unreachable or Waking
    reason: str
    message: str
    since: datetime | None


@dataclass(frozen=True)
class HostTrouble:
    host: HostOut
    failing: list[str]  # the checks that fail, or "unreachable"


@dataclass(frozen=True)
class Attention:
    pending_requests: int
    oldest_request: QueueItem | None
    classes: list[GpuClassOut]
    hosts: int
    unhealthy_hosts: list[HostTrouble]
    failing_clusters: list[ClusterTrouble]
    waking_clusters: list[ClusterTrouble]

    @property
    def short_classes(self) -> list[GpuClassOut]:
        """Classes with GPUs but none left to approve, or with GPUs on nodes not ready."""
        return [
            c
            for c in self.classes
            if c.capacity is not None
            and c.capacity.total
            and (c.capacity.free <= 0 or c.capacity.not_ready)
        ]


def attention(db: Session, principal: Principal, now: datetime | None = None) -> Attention:
    ensure_platform_admin(principal)
    pending, oldest = quotas.pending_requests(db, principal)
    every_host = hosts.list_hosts(db, principal, EVERYTHING).items
    troubles = _cluster_troubles(db, now or datetime.now(UTC))
    return Attention(
        pending_requests=pending,
        oldest_request=oldest,
        classes=gpu_classes.list_classes(db, principal, EVERYTHING).items,
        hosts=len(every_host),
        unhealthy_hosts=[t for t in map(_host_trouble, every_host) if t.failing],
        failing_clusters=[t for t in troubles if t.phase in FAILING_PHASES],
        waking_clusters=[t for t in troubles if t.phase == "Waking"],
    )


def _host_trouble(host: HostOut) -> HostTrouble:
    failing = ["unreachable"] if host.health.reachable is False else []
    failing += [
        f"{c.name}: {c.message}" if c.message else c.name
        for c in host.health.checks
        if not c.passed
    ]
    return HostTrouble(host, failing)


def _cluster_troubles(db: Session, now: datetime) -> list[ClusterTrouble]:
    found = []
    for row in repository.live_cluster_states(db):
        conditions = list(row.conditions or [])
        phase = cond.phase_of(cond.statuses(conditions), False, row.power)
        stuck_waking = phase == "Waking" and _waking_since(row, now) > WAKING_STUCK_AFTER
        if phase in FAILING_PHASES or stuck_waking:
            found.append(_trouble(row, phase, conditions))
    return found


def _waking_since(row: Any, now: datetime) -> timedelta:
    asked = parse(row.power_changed_at) if row.power_changed_at else None
    return now - asked if asked else timedelta(0)


def _trouble(row: Any, phase: str, conditions: list[cond.Condition]) -> ClusterTrouble:
    """The condition that explains the phase: the host's reachability, Failed, or Asleep."""
    type_ = {"Unreachable": cond.HOST_REACHABLE, "Failed": cond.FAILED}.get(phase, cond.ASLEEP)
    found = cond.find(conditions, type_) or {}
    since = parse(
        row.power_changed_at if phase == "Waking" else str(found.get("lastTransitionTime", ""))
    )
    return ClusterTrouble(
        row.tenant,
        row.name,
        row.host_cluster,
        phase,
        str(found.get("reason", "")),
        str(found.get("message", "")),
        since,
    )
