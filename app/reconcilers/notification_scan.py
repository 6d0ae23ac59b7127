"""Kind ``notification-scan``: the notifications that time, not a change, brings about.

One key, ``all``, due every ``worker_poll_seconds * 150`` (5 min by default): nothing enqueues
it, time passing changes no row. A pass tells, each in a fenced transaction of its own
(``app.notifications.scan``): approved quotas ending within three days, clusters provisioning
for longer than ``PORTAL_NOTIFY_STUCK_MINUTES``, kubeconfigs ending within a day, and tenants'
GPUs idle past the window, once a day per tenant. Every notice has a dedupe key on the outbox's
unique column, so a second pass, or a second worker, tells nothing twice; each pass writes at
most ``LIMIT`` of a sort and, when it did, looks again at once for the rest.

The idle GPUs are read from the operator's Prometheus only when a tenant holding GPUs was not
told yet today, after the reading session and before the writing one (no HTTP while a
connection is held). Unknown (no Prometheus, down, slow) tells nothing and fails nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.orm import Session

from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.notifications import scan
from app.reconcilers.kind import DONE, GONE, Context, Outcome
from app.telemetry.prometheus import Unavailable
from app.utilisation import service as utilisation
from app.utilisation.mapping import Ownership
from app.utilisation.repository import ownership
from app.workqueue import ALL, NOTIFICATION_SCAN

log = logging.getLogger(__name__)

KEY = ALL
# Notifications of one sort a pass writes at most.
LIMIT = 100
# Looked at again this soon when a sort had more than a pass writes.
MORE_SECONDS = 1.0


class NotificationScanner:
    name = NOTIFICATION_SCAN

    def __init__(self, settings: Settings, database: Database, *,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.settings = settings
        self.database = database
        self.now = clock
        self.resync_seconds = settings.worker_poll_seconds * 150

    def keys(self, db: Session) -> list[str]:
        return [KEY]

    def reconcile(self, key: str, context: Context) -> Outcome:
        if key != KEY:
            return GONE
        now = self.now()
        stuck = self.settings.notify_stuck_minutes
        told = {
            "quota.expiring": self._write(context, lambda db: scan.expiring_quotas(
                db, now, LIMIT)),
            "cluster.stuck": self._write(context, lambda db: scan.stuck_clusters(
                db, now, stuck, LIMIT)),
            "kubeconfig.expiring": self._write(context, lambda db: scan.expiring_kubeconfigs(
                db, now, LIMIT)),
            "gpus.idle": self._idle(context, now),
        }
        if any(told.values()):
            log.info("notified: %s", ", ".join(f"{n} {kind}" for kind, n in told.items() if n))
        if any(count >= LIMIT for count in told.values()):
            return Outcome(requeue_after=MORE_SECONDS)
        return DONE

    def _write(self, context: Context, step: Callable[[Session], int]) -> int:
        with self.database.transaction() as db:
            context.lease.fence(db)
            return step(db)

    def _idle(self, context: Context, now: datetime) -> int:
        day = now.date()
        with self.database.session() as db:
            owners = ownership(db)
            untold = scan.idle_untold(db, _tenants(owners), day)
        if not untold or not self.settings.prometheus_url:
            return 0
        reading = self._read(owners, now)
        if reading is None:
            return 0
        return self._write(context, lambda db: scan.idle_gpus(db, reading, day, LIMIT))

    def _read(self, owners: Ownership, now: datetime) -> scan.IdleReading | None:
        try:
            read = utilisation.read_owned(owners, self.settings, now)
        except Unavailable as unavailable:
            # The admins' idle-GPU view shows the reason; nobody is told of what is unknown.
            log.debug("idle GPUs unknown, nobody told: %s", unavailable.reason)
            return None
        threshold = self.settings.idle_gpu_utilisation_percent
        idle: dict[str, dict[str | None, int]] = {}
        for gpu in read.gpus:
            if gpu.idle(threshold):
                by_cluster = idle.setdefault(gpu.owner.tenant, {})
                by_cluster[gpu.owner.cluster] = by_cluster.get(gpu.owner.cluster, 0) + 1
        return scan.IdleReading(idle, read.observed_at, threshold,
                                self.settings.idle_gpu_window_minutes)


def _tenants(owners: Ownership) -> set[str]:
    return {owner.tenant for owner in (*owners.by_namespace.values(), *owners.by_node.values())}
