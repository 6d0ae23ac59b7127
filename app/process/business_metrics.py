"""The figures an operator charts, read from the database when the worker is scraped (one
process answers them: not multiplied by the web processes): per tenant and GPU class the GPUs
approved, allocated, in use, of those the burst, and asleep; pending quota requests and the
oldest one's age; clusters by phase, machines by phase; the queue's backlog per kind.

Each scrape reads in one short transaction under its own statement timeout: a slow database
costs the scrape those figures (logged), never the worker's reconciles."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from app.clusters import conditions as cond
from app.clusters.models import VirtualCluster
from app.database.core import Database, utcnow
from app.gpu_classes.models import GpuClass
from app.machines.models import Machine
from app.quotas import repository as quotas
from app.quotas.models import QuotaRequest, TenantQuota
from app.tenants.models import Tenant
from app.workqueue import repository as queue

log = logging.getLogger(__name__)

STATEMENT_TIMEOUT_MS = 5000
GPU_STATES = ("approved", "allocated", "in_use", "burst", "slept")
Figures = dict[tuple[str, str], dict[str, float]]


class BusinessGauges(Collector):
    def __init__(self, database: Database, kinds: Iterable[str],
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.database = database
        self.kinds = sorted(kinds)
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        try:
            with self.database.session() as db:
                if db.get_bind().dialect.name == "postgresql":
                    db.execute(text(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}"))
                read = _read(db, now)
                db.rollback()
        except Exception as error:  # a scrape without them, rather than none at all
            log.warning("the business metrics could not be read: %s", type(error).__name__)
            return
        yield from self._families(read, now)

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


def _read(db: Session, now: datetime) -> dict[str, Any]:
    pending = db.execute(select(func.count(), func.min(QuotaRequest.created_at))
                         .where(QuotaRequest.state == "pending")).one()
    return {"gpus": _gpus(db), "pending": (int(pending[0]), pending[1]),
            "clusters": _cluster_phases(db),
            "machines": {phase: int(count) for phase, count in db.execute(
                select(Machine.phase, func.count()).group_by(Machine.phase))},
            "due": queue.due_per_kind(db, now)}


def _gpus(db: Session) -> Figures:
    """The tenant quota rows as the dashboard shows them (``quotas.quota_rows_query``), summed
    over regions, and the GPUs of each tenant's sleeping clusters."""
    figures: Figures = defaultdict(lambda: defaultdict(float))
    rows = db.execute(quotas.quota_rows_query(None).add_columns(Tenant.slug.label("tenant"))
                      .join(Tenant, Tenant.id == TenantQuota.tenant_id))
    for row in rows:
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
