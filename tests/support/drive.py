"""Driving one kind through the worker runtime on its own, one inline pass at a time: how
tests (and the in-process bench) run a reconciler without a worker process."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.reconcilers.kind import Kind
from app.reconcilers.runtime import Runtime

# The runtimes the drive made for a kind live on the kind, so they go with it (a runtime
# refers to its kind: in a weak map keyed by the kind, neither would ever go).
RUNTIMES = "_test_drive_runtimes"


class Drivable(Kind, Protocol):
    database: Database
    settings: Settings


def run_due(kind: Drivable, worker_id: str = "worker") -> int:
    """Reconciles each of ``kind``'s items due now once, as worker ``worker_id``; how many."""
    return runtime_for(kind, worker_id).run_pass()


def runtime_for(kind: Drivable, worker_id: str) -> Runtime:
    """The runtime ``run_due`` drives ``kind`` with as ``worker_id``: one per id, as if each
    were a worker process of its own, on the kind's clock (its ``now``) when it has one."""
    runtimes: dict[str, Runtime] = vars(kind).setdefault(RUNTIMES, {})
    runtime = runtimes.get(worker_id)
    if runtime is None:
        clock: Callable[[], datetime] = getattr(kind, "now", utcnow)
        runtime = runtimes[worker_id] = Runtime(
            kind.database, [kind], lease_seconds=kind.settings.worker_lease_seconds,
            clock=clock, identity=worker_id)
    return runtime
