"""Kind ``sleep-policy``: each live cluster's sleep policy, carried out.

One key, ``all``, due every ``worker_poll_seconds * 15`` (30 s by default) and at once when a
policy is set. A pass reads the clusters with a policy and their GPU use in one session, and
for each one whose policy asks something (``app.clusters.sleep_policy.decide``) locks it in a
transaction of its own, decides again on the locked row and carries it out: sleep when idle
(no GPU pod bound in its idle minutes, read from the usage samples) or inside its schedule's
window, wake what the schedule put to sleep when the window ends, announce a deletion
``PORTAL_SLEEP_DELETE_WARNING_HOURS`` before it, then delete. Every change is audited with
the actor ``sleep-policy``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from app.clusters import power, repository
from app.clusters import sleep_policy as policy
from app.clusters.models import VirtualCluster
from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kit.errors import Conflict
from app.reconcilers.kind import DONE, GONE, Context, Outcome
from app.usage.repository import ClusterGpuUse, cluster_gpu_use
from app.usage.sampling import sample_hold
from app.workqueue import ALL, SLEEP_POLICY

log = logging.getLogger(__name__)

KEY = ALL


class SleepPolicyReconciler:
    name = SLEEP_POLICY

    def __init__(self, settings: Settings, database: Database, *,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.settings = settings
        self.database = database
        self.now = clock
        self.resync_seconds = settings.worker_poll_seconds * 15
        self.speedup = settings.sleep_policy_speedup
        self.warning = timedelta(hours=settings.sleep_delete_warning_hours) / self.speedup
        # A usage sample stands this long: a cluster not sampled since is not known to be idle.
        self.sample_stands = timedelta(seconds=sample_hold(settings.worker_resync_seconds))

    def keys(self, db: Session) -> Iterable[str]:
        return [KEY]

    def reconcile(self, key: str, context: Context) -> Outcome:
        if key != KEY:
            return GONE
        now = self.now()
        for cluster_id, action in self._due(now):
            self._carry_out(cluster_id, action, now, context)
        return DONE

    def _due(self, now: datetime) -> list[tuple[int, policy.Action]]:
        """What the policies ask, read without locks."""
        with self.database.session() as db:
            clusters = repository.sleep_policy_clusters(db)
            use = self._use(db, clusters, now)
            found = [(c.id, policy.decide(c, self._moment(c, now, use))) for c in clusters]
        return [(cluster_id, action) for cluster_id, action in found if action is not None]

    def _use(self, db: Session, clusters: list[VirtualCluster],
             now: datetime) -> dict[int, ClusterGpuUse]:
        """The use of the awake clusters with idle minutes, read back over the longest idle
        window, and at least a sample's standing."""
        idle = [c for c in clusters
                if c.sleep_after_idle_minutes is not None and c.power == power.AWAKE]
        if not idle:
            return {}
        longest = max(c.sleep_after_idle_minutes or 0 for c in idle)
        since = now - max(timedelta(minutes=longest) / self.speedup, self.sample_stands)
        return cluster_gpu_use(db, [c.id for c in idle], int(since.timestamp()))

    def _moment(self, cluster: VirtualCluster, now: datetime,
                use: dict[int, ClusterGpuUse]) -> policy.Moment:
        return policy.Moment(now=now, busy=self._busy(cluster, now, use.get(cluster.id)),
                             warning=self.warning, speedup=self.speedup)

    def _busy(self, cluster: VirtualCluster, now: datetime,
              use: ClusterGpuUse | None) -> bool | None:
        """Whether a GPU pod was bound in the cluster's idle window, or in the latest sample
        (it stands until the next); None: not sampled lately (the worker could not read its
        host), so not known to be idle."""
        if cluster.sleep_after_idle_minutes is None:
            return None
        window = timedelta(minutes=cluster.sleep_after_idle_minutes) / self.speedup
        if use is None or use.sampled_s < (now - max(window, self.sample_stands)).timestamp():
            return None
        since_s = min((now - window).timestamp(), use.sampled_s)
        return use.busy_s is not None and use.busy_s >= since_s

    def _carry_out(self, cluster_id: int, action: policy.Action, now: datetime,
                   context: Context) -> None:
        with self.database.transaction() as db:
            context.lease.fence(db)
            cluster = repository.lock_cluster(db, cluster_id)
            if cluster is None:
                return
            moment = self._moment(cluster, now, self._use(db, [cluster], now))
            if policy.decide(cluster, moment) != action:
                return  # changed since it was read: the next pass looks again
            try:
                policy.carry_out(db, cluster, action, moment)
            except Conflict as error:  # being deleted meanwhile
                log.info("cluster %d: %s not carried out: %s", cluster_id, action, error)
                return
        log.info("cluster %d: sleep policy: %s", cluster_id, action)
