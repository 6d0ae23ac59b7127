"""The worker's periodic health check of every registered host.

Each pass (every ``worker_resync_seconds``) runs the checks of app/hosts/health.py against
each host with a one-attempt, short-timeout client, outside any transaction, then stores the
results on the host's row. A host turning reachable or unreachable is audited; a refresh
that changes nothing is not. The chart check is asked once per pass, not once per host.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import cache

from app.audit import service as audit
from app.database.core import Database
from app.hosts import repository, service
from app.hosts.health import ChartAnswer, ChartProbe, CheckResult
from app.kit.config import Settings
from app.kube.connector import HostTarget, KubeConnector

log = logging.getLogger(__name__)
ACTOR = "host-health"


class _OncePerPass:
    """The chart resolver, asked at most once per (repo, chart, version) in one pass."""

    def __init__(self, inner: ChartProbe) -> None:
        self._lookup = cache(inner.lookup)

    def lookup(self, repo: str, chart: str, version: str) -> ChartAnswer:
        return self._lookup(repo, chart, version)


class HostHealthReconciler:
    name = "hosts"

    def __init__(self, settings: Settings, database: Database, kube: KubeConnector,
                 charts: ChartProbe | None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.database = database
        self.kube = kube
        self.charts = charts
        self.clock = clock
        self.period = settings.worker_resync_seconds
        self._next = 0.0

    def run_due(self, worker_id: str) -> int:
        if self.clock() < self._next:
            return 0
        self._next = self.clock() + self.period
        with self.database.transaction() as db:
            targets = service.targets(db, self.settings)
        charts = _OncePerPass(self.charts) if self.charts is not None else None
        for target in targets:
            self._store(target, service.checks_of(target, self.settings, self.kube, charts))
        return len(targets)

    def _store(self, target: HostTarget, results: list[CheckResult]) -> None:
        with self.database.transaction() as db:
            row = repository.host_by_id(db, target.host_id)
            if row is None:
                return  # deleted meanwhile
            was = row.health_reachable
            service.store_health(row, results)
            if was is not None and was != row.health_reachable:
                action = "reachable" if row.health_reachable else "unreachable"
                reachable = next(r for r in results if r.name == "api-reachable")
                log.warning("host cluster %s is %s: %s", row.name, action, reachable.message)
                audit.record(db, action=f"host_cluster.{action}", actor_id=None,
                             actor_label=ACTOR, target_type=service.TARGET_TYPE,
                             target_id=row.id, before={"reachable": was},
                             after={"reachable": row.health_reachable,
                                    "message": reachable.message})
