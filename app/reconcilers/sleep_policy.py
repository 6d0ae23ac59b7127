"""Kind ``sleep-policy``: each live cluster's sleep policy, carried out.

One key, ``all``, due every ``worker_poll_seconds * 15`` (30 s by default) and at once when a
policy is set. A pass reads the clusters with a policy and their GPU use in one session, and
for each one whose policy asks something (``app.clusters.sleep_policy.decide``) locks it in a
transaction of its own, decides again on the locked row and carries it out: sleep when idle
(no GPU pod bound in its idle minutes, read from the usage samples) or inside its schedule's
window, wake what the schedule put to sleep when the window ends, announce a deletion
``PORTAL_SLEEP_DELETE_WARNING_HOURS`` before it, then delete. Every change is audited with
the actor ``sleep-policy``. A deletion waits while its warning's notifications are pending
(email ones only when SMTP is configured: otherwise they cannot go), at most one more warning
period (``app.clusters.sleep_policy``).

A cluster whose policy measures idleness by ``utilisation`` is idle also while GPU pods are
bound, if every GPU it holds stayed below ``PORTAL_IDLE_GPU_UTILISATION_PERCENT`` over the
window and was bound for all of it, and Prometheus shows as many of its GPUs as its latest
usage sample says are bound. Prometheus is read once per pass, only when such a cluster has
GPU pods bound, after the reading session and before any lock (its deadline is
``PORTAL_PROMETHEUS_TIMEOUT_SECONDS``); the locked decision uses the same reading. Unknown
(no Prometheus, Prometheus down or slow, too few series) never puts a cluster to sleep.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.clusters import power, repository
from app.clusters import sleep_policy as policy
from app.clusters.models import VirtualCluster
from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kit.errors import Conflict
from app.notifications.kinds import CLUSTER_DELETION_ANNOUNCED
from app.notifications.models import Notification, NotificationDelivery
from app.reconcilers.kind import DONE, GONE, Context, Outcome
from app.telemetry.prometheus import Unavailable
from app.tenants.models import Tenant
from app.usage.models import UsageSample
from app.usage.repository import CLUSTER_SOURCES, ClusterGpuUse, cluster_gpu_use
from app.usage.sampling import sample_hold
from app.utilisation.mapping import Ownership
from app.utilisation.repository import ownership
from app.utilisation.windows import Asked, cluster_peaks
from app.workqueue import ALL, SLEEP_POLICY

log = logging.getLogger(__name__)

KEY = ALL
UTILISATION = "utilisation"


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
        due, reading = self._due(now)
        for cluster_id, action in due:
            self._carry_out(cluster_id, action, now, reading, context)
        return DONE

    def _due(self, now: datetime) -> tuple[list[tuple[int, policy.Action]], Reading]:
        """What the policies ask, read without locks; Prometheus, when a cluster needs it, is
        read once the session is closed (its rows stay loaded)."""
        with self.database.session() as db:
            clusters = repository.sleep_policy_clusters(db)
            use = self._use(db, clusters, now)
            question = self._question(db, clusters, use, now)
            announcing = self._announcing(
                db, [c.id for c in clusters if c.deletion_warned_at is not None])
        reading = self._read(question, now)
        found = [(c.id, policy.decide(c, self._moment(c, now, use, reading,
                                                      c.id in announcing)))
                 for c in clusters]
        return [(cluster_id, action) for cluster_id, action in found
                if action is not None], reading

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

    def _window(self, cluster: VirtualCluster) -> timedelta:
        return timedelta(minutes=cluster.sleep_after_idle_minutes or 0) / self.speedup

    def _utilisation_window_s(self, cluster: VirtualCluster) -> int:
        """The idle minutes, and at least two scrapes, so a sped-up window holds two readings."""
        return math.ceil(max(self._window(cluster).total_seconds(),
                             2 * self.settings.utilisation_scrape_seconds))

    def _question(self, db: Session, clusters: list[VirtualCluster],
                  use: dict[int, ClusterGpuUse], now: datetime) -> Question | None:
        """What to ask Prometheus: the awake clusters measuring by utilisation that had a GPU
        pod bound in their minutes (None: none, or no Prometheus: nothing is read)."""
        wanted = [c for c in clusters if c.idle_measure == UTILISATION and not c.never_sleep
                  and self._bound_busy(c, now, use.get(c.id)) is True]
        if not wanted or not self.settings.prometheus_url:
            return None
        slugs = dict(db.execute(select(Tenant.id, Tenant.slug).where(
            Tenant.id.in_({c.tenant_id for c in wanted}))).all())
        asked = {c.id: Asked(slugs[c.tenant_id], c.name, self._utilisation_window_s(c))
                 for c in wanted}
        longest = max(self._window(c) for c in wanted)
        since_s = int((now - max(longest, self.sample_stands)).timestamp())
        return Question(asked, ownership(db), bound_gpus(db, list(asked), since_s))

    def _read(self, question: Question | None, now: datetime) -> Reading:
        if question is None:
            return Reading()
        try:
            peaks = cluster_peaks(self.settings, question.ownership, question.asked, now)
        except Unavailable as unavailable:
            log.info("sleep policy: GPU utilisation unknown: %s", unavailable.reason)
            return Reading(unknown=unavailable.reason)
        return Reading(peaks=peaks, bound=question.bound, asked=question.asked)

    def _announcing(self, db: Session, cluster_ids: list[int]) -> set[int]:
        """The clusters among ``cluster_ids`` whose deletion warning is still pending for
        someone; email counts only when SMTP is configured."""
        if not cluster_ids:
            return set()
        channels = ["webhook", "email"] if self.settings.smtp_host else ["webhook"]
        return announcing(db, cluster_ids, channels)

    def _moment(self, cluster: VirtualCluster, now: datetime, use: dict[int, ClusterGpuUse],
                reading: Reading, announcing: bool = False) -> policy.Moment:
        busy = self._bound_busy(cluster, now, use.get(cluster.id))
        evidence: dict[str, object] = {}
        if busy is True and cluster.idle_measure == UTILISATION:
            busy, evidence = self._utilisation_busy(cluster, reading)
        return policy.Moment(now=now, busy=busy, warning=self.warning, speedup=self.speedup,
                             evidence=evidence, announcing=announcing)

    def _bound_busy(self, cluster: VirtualCluster, now: datetime,
                    use: ClusterGpuUse | None) -> bool | None:
        """Whether a GPU pod was bound in the cluster's idle window, or in the latest sample
        (it stands until the next); None: not sampled lately (the worker could not read its
        host), so not known to be idle."""
        if cluster.sleep_after_idle_minutes is None:
            return None
        window = self._window(cluster)
        if use is None or use.sampled_s < (now - max(window, self.sample_stands)).timestamp():
            return None
        since_s = min((now - window).timestamp(), use.sampled_s)
        return use.busy_s is not None and use.busy_s >= since_s

    def _utilisation_busy(self, cluster: VirtualCluster,
                          reading: Reading) -> tuple[bool | None, dict[str, object]]:
        """A cluster with GPU pods bound, by its GPUs' peaks: busy if one reached the
        threshold; idle if every GPU the latest sample counts bound shows, each below it;
        otherwise (unknown, too few series: bound less than the window ago) None."""
        peaks = reading.peaks.get(cluster.id)
        if peaks is None:
            return None, {}
        threshold = self.settings.idle_gpu_utilisation_percent
        if any(peak >= threshold for peak in peaks):
            return True, {}
        bound = reading.bound.get(cluster.id)
        if bound is None or not peaks or len(peaks) < math.ceil(bound):
            return None, {}
        return False, {"measure": UTILISATION, "peak_percent": max(peaks),
                       "threshold_percent": threshold, "gpus": len(peaks),
                       "window_seconds": reading.asked[cluster.id].window_s}

    def _carry_out(self, cluster_id: int, action: policy.Action, now: datetime,
                   reading: Reading, context: Context) -> None:
        with self.database.transaction() as db:
            context.lease.fence(db)
            cluster = repository.lock_cluster(db, cluster_id)
            if cluster is None:
                return
            moment = self._moment(cluster, now, self._use(db, [cluster], now), reading,
                                  cluster_id in self._announcing(db, [cluster_id]))
            if policy.decide(cluster, moment) != action:
                return  # changed since it was read: the next pass looks again
            try:
                policy.carry_out(db, cluster, action, moment)
            except Conflict as error:  # being deleted meanwhile
                log.info("cluster %d: %s not carried out: %s", cluster_id, action, error)
                return
        log.info("cluster %d: sleep policy: %s", cluster_id, action)


@dataclass(frozen=True)
class Question:
    """What one pass asks Prometheus, read in its session: the clusters and their windows,
    who holds which namespace and node, and the GPUs each cluster's latest sample bound."""

    asked: dict[int, Asked]
    ownership: Ownership
    bound: dict[int, float]


@dataclass(frozen=True)
class Reading:
    """What Prometheus said in one pass: per asked cluster its GPUs' peaks (a cluster not
    asked, or all when ``unknown``, has none)."""

    peaks: dict[int, list[float]] = field(default_factory=dict)
    bound: dict[int, float] = field(default_factory=dict)
    asked: dict[int, Asked] = field(default_factory=dict)
    unknown: str | None = None


def bound_gpus(db: Session, cluster_ids: list[int], since_s: int) -> dict[int, float]:
    """The GPUs each cluster's latest raw sample since ``since_s`` counts bound (its queue's
    or its namespace quota's, the larger)."""
    sources = (UsageSample.source.in_(CLUSTER_SOURCES),
               UsageSample.subject_id.in_(cluster_ids), UsageSample.taken_s >= since_s)
    latest = select(UsageSample.subject_id, func.max(UsageSample.taken_s).label("taken_s")) \
        .where(*sources).group_by(UsageSample.subject_id).subquery()
    rows = db.execute(
        select(UsageSample.subject_id, func.max(UsageSample.used_gpus))
        .join(latest, (latest.c.subject_id == UsageSample.subject_id)
              & (latest.c.taken_s == UsageSample.taken_s))
        .where(*sources).group_by(UsageSample.subject_id))
    return {int(cluster_id): float(used) for cluster_id, used in rows}


def announcing(db: Session, cluster_ids: list[int], channels: list[str]) -> set[int]:
    """The clusters with a deletion warning's delivery on ``channels`` still pending."""
    subjects = [str(cluster_id) for cluster_id in cluster_ids]
    rows = db.scalars(
        select(Notification.subject_id).distinct()
        .join(NotificationDelivery, NotificationDelivery.notification_id == Notification.id)
        .where(Notification.kind == CLUSTER_DELETION_ANNOUNCED,
               Notification.subject_type == "virtual_cluster",
               Notification.subject_id.in_(subjects),
               NotificationDelivery.state == "pending",
               NotificationDelivery.channel.in_(channels)))
    return {int(subject) for subject in rows}
