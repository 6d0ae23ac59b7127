"""Driving a kind through the worker runtime, one inline pass at a time: how tests (and the
in-process bench) run a reconciler without a worker process.

The cluster kind never runs alone in a worker: beside it run the kinds that make what its
clusters wait for (their tenant's queue, their host's root queue and guards). The drive runs
them with it, on its settings, database and host."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.reconcilers.clusters import ClusterReconciler
from app.reconcilers.kind import Kind
from app.reconcilers.platform_objects import PlatformObjectsReconciler
from app.reconcilers.runtime import Runtime
from app.reconcilers.tenant_queues import TenantQueueReconciler
from app.workqueue import PLATFORM_OBJECTS, TENANT_QUEUES

# The runtimes the drive made for a kind live on the kind, so they go with it (a runtime
# refers to its kind: in a weak map keyed by the kind, neither would ever go).
RUNTIMES = "_test_drive_runtimes"
# The kinds a cluster waits for, run before its pass and after (for what it asked).
SHARED = (TENANT_QUEUES, PLATFORM_OBJECTS)


class Drivable(Kind, Protocol):
    database: Database
    settings: Settings


def run_due(kind: Drivable, worker_id: str = "worker") -> int:
    """Reconciles each item due now once, as worker ``worker_id``: the kind's, and for the
    cluster kind those of the kinds beside it (first what its clusters wait for, then the
    clusters, then what they asked for); how many ran."""
    runtime = runtime_for(kind, worker_id)
    if not isinstance(kind, ClusterReconciler):
        return runtime.run_pass()
    return (runtime.run_pass(SHARED) + runtime.run_pass([kind.name])
            + runtime.run_pass(SHARED))


def runtime_for(kind: Drivable, worker_id: str) -> Runtime:
    """The runtime ``run_due`` drives ``kind`` with as ``worker_id``: one per id, as if each
    were a worker process of its own, on the kind's clock (its ``now``) when it has one."""
    runtimes: dict[str, Runtime] = vars(kind).setdefault(RUNTIMES, {})
    runtime = runtimes.get(worker_id)
    if runtime is None:
        clock: Callable[[], datetime] = getattr(kind, "now", utcnow)
        runtime = runtimes[worker_id] = Runtime(
            kind.database, [*beside(kind), kind],
            lease_seconds=kind.settings.worker_lease_seconds, clock=clock, identity=worker_id)
    return runtime


def beside(kind: Drivable) -> list[Kind]:
    """The kinds a worker runs beside ``kind`` that it depends on."""
    if not isinstance(kind, ClusterReconciler):
        return []
    made_from = (kind.settings, kind.database, kind.connector)
    return [TenantQueueReconciler(*made_from), PlatformObjectsReconciler(*made_from)]
