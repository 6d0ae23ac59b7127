"""The figures an operator charts, read from the database when the worker is scraped (one
process answers them: not multiplied by the web processes): per tenant and GPU class the GPUs
approved, allocated, in use, of those the burst, and asleep; pending quota requests and the
oldest one's age; clusters by phase, machines by phase; the queue's backlog per kind; the
notification deliveries pending per channel; and, given
the settings, the idle GPUs per tenant and class from the operator's Prometheus.

Each scrape reads in one short transaction under its own statement timeout: a slow database
costs the scrape those figures (logged), never the worker's reconciles. The idle GPUs are read
at most every ``IDLE_GAUGE_CACHE_SECONDS`` (a Prometheus that scrapes the worker would otherwise
query itself on every scrape): the scrape that finds the last reading that old reads the
ownership in its transaction and asks Prometheus after it ended, in the background, answering
with the last reading meanwhile. No HTTP while a connection is held, and no scrape waits for
Prometheus (whose scrape timeout may be shorter than the portal's bound on its queries)."""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from app.clusters import conditions as cond
from app.clusters.models import VirtualCluster
from app.database.core import Database, utcnow
from app.gpu_classes.models import GpuClass
from app.kit.config import Settings
from app.machines.models import Machine
from app.notifications.models import CHANNELS, NotificationDelivery
from app.quotas import repository as quotas
from app.quotas.models import QuotaRequest, TenantQuota
from app.telemetry.prometheus import Unavailable
from app.tenants.models import Tenant
from app.utilisation import repository as utilisation
from app.utilisation import service as idle
from app.utilisation.mapping import Ownership
from app.workqueue import repository as queue

log = logging.getLogger(__name__)

STATEMENT_TIMEOUT_MS = 5000
GPU_STATES = ("approved", "allocated", "in_use", "burst", "slept")
IDLE_GAUGE_CACHE_SECONDS = 30
Figures = dict[tuple[str, str], dict[str, float]]
IdleCounts = dict[tuple[str, str], int]
Runner = Callable[[Callable[[], None]], None]


def in_background(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="idle-gpus", daemon=True).start()


class BusinessGauges(Collector):
    """``settings`` (its Prometheus, the idle rule) adds the idle GPUs, served from the first
    reading on; without, they are not served. ``run`` runs a reading of Prometheus (tests: at
    once, in the scrape)."""

    def __init__(self, database: Database, kinds: Iterable[str],
                 clock: Callable[[], datetime] = utcnow, settings: Settings | None = None,
                 run: Runner = in_background) -> None:
        self.database = database
        self.kinds = sorted(kinds)
        self.clock = clock
        self.settings = settings
        self.run = run
        # When the idle GPUs were last read, and what was read (None: Prometheus could not say).
        self._idle: tuple[datetime, IdleCounts | None] | None = None
        self._reading = threading.Lock()  # one reading at a time

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        try:
            with self.database.session() as db:
                if db.get_bind().dialect.name == "postgresql":
                    db.execute(text(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}"))
                read = _read(db, now)
                ownership = utilisation.ownership(db) if self._idle_due(now) else None
                db.rollback()
        except Exception as error:  # a scrape without them, rather than none at all
            log.warning("the business metrics could not be read: %s", type(error).__name__)
            return
        yield from self._families(read, now)
        if ownership is not None and self._reading.acquire(blocking=False):
            try:
                self.run(lambda: self._read_idle(ownership, now))
            except BaseException:  # no thread to be had: the next scrape tries again
                self._reading.release()
                raise
        if self._idle is not None:
            yield from _idle_families(self._idle[1])

    def _idle_due(self, now: datetime) -> bool:
        return self.settings is not None and not self._reading.locked() and (
            self._idle is None
            or now - self._idle[0] >= timedelta(seconds=IDLE_GAUGE_CACHE_SECONDS)
            or now < self._idle[0])

    def _read_idle(self, ownership: Ownership, now: datetime) -> None:
        assert self.settings is not None
        try:
            self._idle = (now, _idle_counts(ownership, self.settings, now))
        except Exception:  # a bug: the last reading stays, the next scrape reads again
            log.exception("the idle GPUs could not be read")
        finally:
            self._reading.release()

    def _families(self, read: dict[str, Any], now: datetime) -> Iterator[Metric]:
        gpus = GaugeMetricFamily("portal_tenant_gpus", "a tenant's GPUs of a class, all regions: "
                                 "approved, allocated to its clusters, in use (bound to pods), "
                                 "of those the burst, and those of its sleeping clusters",
                                 labels=["tenant", "gpu_class", "state"])
        for (tenant, gpu_class), states in sorted(read["gpus"].items()):
            for state in GPU_STATES:
                if state in states:
                    gpus.add_metric([tenant, gpu_class, state], states[state])
        yield gpus
        count, oldest = read["pending"]
        yield GaugeMetricFamily("portal_quota_requests_pending",
                                "quota requests waiting for a platform admin", value=count)
        yield GaugeMetricFamily("portal_quota_request_oldest_pending_age_seconds",
                                "how long the oldest pending quota request has waited (0: none)",
                                value=_age(now, oldest))
        yield _by("portal_clusters", "virtual clusters by phase (as their lists show it)",
                  "phase", read["clusters"])
        yield _by("portal_machines", "bare-metal machines by phase", "state", read["machines"])
        due: dict[str, tuple[int, datetime]] = read["due"]
        depth = GaugeMetricFamily("portal_workqueue_depth", "items due now that no worker "
                                  "holds, by kind", labels=["kind"])
        age = GaugeMetricFamily("portal_workqueue_oldest_due_age_seconds", "how long the "
                                "oldest of those has been due, by kind (0: none)",
                                labels=["kind"])
        for kind in sorted({*self.kinds, *due}):
            items, since = due.get(kind, (0, None))
            depth.add_metric([kind], items)
            age.add_metric([kind], _age(now, since))
        yield depth
        yield age
        pending = GaugeMetricFamily("portal_notification_deliveries_pending", "notification "
                                    "deliveries not yet delivered, failed, dropped or expired, "
                                    "by channel", labels=["channel"])
        for channel in CHANNELS:
            pending.add_metric([channel], read["deliveries"].get(channel, 0))
        yield pending


def _idle_counts(ownership: Ownership, settings: Settings, now: datetime) -> IdleCounts | None:
    try:
        reading = idle.read_owned(ownership, settings, now)
    except Unavailable as unavailable:
        # The admins' idle-GPU view says why, with the reason; every 30 s would be noise here.
        log.debug("idle GPUs unknown: %s", unavailable.reason)
        return None
    return idle.count_idle(reading, settings.idle_gpu_utilisation_percent)


def _idle_families(counts: IdleCounts | None) -> Iterator[Metric]:
    yield GaugeMetricFamily("portal_utilisation_known", "1 when the operator's Prometheus "
                            "answered the last reading of the GPUs' utilisation, 0 when it "
                            "could not say (the idle GPUs are then left out)",
                            value=0 if counts is None else 1)
    if counts is None:
        return
    family = GaugeMetricFamily(
        "portal_tenant_idle_gpus", "a tenant's GPUs of a class bound to pods but idle past the "
        "window (below the threshold all along), of those Prometheus shows",
        labels=["tenant", "gpu_class"])
    for (tenant, gpu_class), count in sorted(counts.items()):
        family.add_metric([tenant, gpu_class], count)
    yield family


def _read(db: Session, now: datetime) -> dict[str, Any]:
    pending = db.execute(select(func.count(), func.min(QuotaRequest.created_at))
                         .where(QuotaRequest.state == "pending")).one()
    return {"gpus": _gpus(db), "pending": (int(pending[0]), pending[1]),
            "clusters": _cluster_phases(db),
            "machines": {phase: int(count) for phase, count in db.execute(
                select(Machine.phase, func.count()).group_by(Machine.phase))},
            "due": queue.due_per_kind(db, now),
            "deliveries": {channel: int(count) for channel, count in db.execute(
                select(NotificationDelivery.channel, func.count())
                .where(NotificationDelivery.state == "pending")
                .group_by(NotificationDelivery.channel))}}


def _gpus(db: Session) -> Figures:
    """The tenant quota rows as the dashboard shows them (``quotas.quota_rows_query``), summed
    over regions, and the GPUs of each tenant's sleeping clusters."""
    figures: Figures = defaultdict(lambda: defaultdict(float))
    rows = db.execute(quotas.quota_rows_query(None).add_columns(Tenant.slug.label("tenant"))
                      .join(Tenant, Tenant.id == TenantQuota.tenant_id))
    for row in rows:
        if row.unit != "gpu":  # these figures are whole GPUs; rows of slices and shares apart
            continue
        states = figures[(row.tenant, row.product)]
        states["approved"] += row.gpus
        states["allocated"] += int(row.allocated or 0)
        if row.in_use is not None:
            states["in_use"] += float(row.in_use)
            states["burst"] += float(row.burst or 0)
        states.setdefault("slept", 0.0)
    asleep = db.execute(
        select(Tenant.slug, GpuClass.product, func.sum(VirtualCluster.gpus))
        .join(Tenant, Tenant.id == VirtualCluster.tenant_id)
        .join(GpuClass, GpuClass.id == VirtualCluster.gpu_class_id)
        .where(VirtualCluster.power == "asleep", VirtualCluster.deletion_requested_at.is_(None))
        .group_by(Tenant.slug, GpuClass.product))
    for tenant, product, slept in asleep:
        figures[(tenant, product)]["slept"] = float(slept or 0)
    return figures


def _cluster_phases(db: Session) -> dict[str, int]:
    phases: dict[str, int] = defaultdict(int)
    rows = db.execute(select(VirtualCluster.conditions, VirtualCluster.deletion_requested_at,
                             VirtualCluster.power))
    for conditions, deletion, power in rows:
        phases[cond.phase_of(cond.statuses(conditions or []), deletion is not None, power)] += 1
    return phases


def _by(name: str, documentation: str, label: str, counts: dict[str, int]) -> Metric:
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for value, count in sorted(counts.items()):
        family.add_metric([value], count)
    return family


def _age(now: datetime, since: datetime | None) -> float:
    return max((now - since).total_seconds(), 0.0) if since is not None else 0.0
