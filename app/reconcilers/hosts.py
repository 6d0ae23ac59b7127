"""Host health, one host cluster per key: the checks of app/hosts/health.py, stored on its row.

A reconcile runs the host's checks with a one-attempt, short-timeout client, outside any
transaction, then stores the results on the host's row. A host turning reachable or unreachable
is audited; a refresh that changes nothing is not. The checks never raise: an unreachable host
is a failed check on its page, so this kind neither waits for the host's breaker nor opens it.

The runtime reconciles each host at every resync period, and at once when the hosts service
registers, edits or re-enables it. The chart check asks the same (repo, chart, version) of
every host: its answers are remembered for a minute, so a resync of many hosts asks once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from app.audit import service as audit
from app.database.core import Database, utcnow
from app.hosts import repository, service
from app.hosts.health import ChartAnswer, ChartProbe, CheckResult
from app.kit.config import Settings
from app.kube.connector import KubeConnector
from app.reconcilers.host_keys import host_keys, host_target
from app.reconcilers.kind import DONE, GONE, Context, Outcome
from app.reconcilers.leases import Lease
from app.workqueue import HOSTS

log = logging.getLogger(__name__)
ACTOR = "host-health"
CHART_MEMO = timedelta(seconds=60)


class ChartMemo:
    """The chart resolver, asked at most once a minute per (repo, chart, version)."""

    def __init__(self, inner: ChartProbe, clock: Callable[[], datetime]) -> None:
        self.inner = inner
        self.clock = clock
        self._answers: dict[tuple[str, str, str], tuple[datetime, ChartAnswer]] = {}
        self._lock = threading.Lock()

    def lookup(self, repo: str, chart: str, version: str) -> ChartAnswer:
        asked = (repo, chart, version)
        with self._lock:
            found = self._answers.get(asked)
        if found is not None and found[0] > self.clock():
            return found[1]
        answer = self.inner.lookup(repo, chart, version)
        with self._lock:
            self._answers[asked] = (self.clock() + CHART_MEMO, answer)
        return answer


class HostHealthReconciler:
    name = HOSTS

    def __init__(self, settings: Settings, database: Database, kube: KubeConnector,
                 charts: ChartProbe | None, *, now: Callable[[], datetime] = utcnow) -> None:
        self.settings = settings
        self.database = database
        self.kube = kube
        self.now = now
        self.charts = ChartMemo(charts, now) if charts is not None else None
        self.resync_seconds = settings.worker_resync_seconds

    def keys(self, db: Session) -> list[str]:
        return host_keys(db, self.settings)

    def reconcile(self, key: str, context: Context) -> Outcome:
        target = host_target(self.database, self.settings, key)
        if target is None:
            return GONE
        results = service.checks_of(target, self.settings, self.kube, self.charts)
        return self._store(target.host_id, results, context.lease)

    def _store(self, host_id: int, results: list[CheckResult], lease: Lease) -> Outcome:
        with self.database.transaction() as db:
            lease.fence(db)
            row = repository.host_by_id(db, host_id)
            if row is None:
                return GONE  # deleted meanwhile
            was = row.health_reachable
            service.store_health(row, results)
            if was is not None and was != row.health_reachable:
                action = "reachable" if row.health_reachable else "unreachable"
                reachable = next(r for r in results if r.name == "api-reachable")
                log.warning("host cluster %s is %s: %s", row.name, action, reachable.message)
                audit.record(db, action=f"host_cluster.{action}", actor_id=None,
                             actor_label=ACTOR, target_type=service.TARGET_TYPE,
                             target_id=row.id, target_label=f"host {row.name}",
                             before={"reachable": was},
                             after={"reachable": row.health_reachable,
                                    "message": reachable.message})
        return DONE
