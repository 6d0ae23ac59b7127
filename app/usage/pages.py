"""What the usage pages show: the report's rows (as the JSON and CSV give them) shaped into
charts and tables, the current utilisation, and the tenants leaving GPUs idle."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from markupsafe import Markup
from sqlalchemy.orm import Session

from app import authz
from app.auth.principal import Principal
from app.quotas.repository import BoundGpus
from app.tenants import access
from app.tenants.models import Tenant
from app.usage import ledger, repository, service
from app.usage.schemas import UsageFilters, UsageRow
from app.web.charts.series import Series, grouped_bars, lines, stacked_bars

DEFAULT_DAYS = 14


@dataclass(frozen=True)
class Span:
    start: datetime
    end: datetime

    def query(self, **extra: str) -> dict[str, str]:
        return {"from": self.start.isoformat(), "to": self.end.isoformat(), **extra}


def span(start: datetime | None, end: datetime | None) -> Span:
    """The pages' range: the last two weeks up to the end of today (UTC) unless given."""
    if end is None:
        today = ledger.now_in_seconds().replace(hour=0, minute=0, second=0)
        end = today + timedelta(days=1)
    end = service.as_utc(end)
    start = service.as_utc(start) if start else end - timedelta(days=DEFAULT_DAYS)
    return Span(start, end)


def _filters(chosen: Span, tenant: str | None) -> UsageFilters:
    return UsageFilters(start=chosen.start, end=chosen.end, tenant=tenant, group_by="day")


def _labels(chosen: Span) -> list[str]:
    return [p.label for p in service.periods(chosen.start, chosen.end, "day")]


def _by_class(rows: list[UsageRow], labels: list[str], field: str) -> list[Series]:
    values: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(labels, 0.0))
    for row in rows:
        values[row.gpu_class][row.period] += getattr(row, field)
    return [Series(gpu_class, [round(v, 6) for v in by_day.values()])
            for gpu_class, by_day in sorted(values.items())]


# ----- a tenant's page


@dataclass(frozen=True)
class ClassNow:
    gpu_class: str
    approved: int
    allocated: int
    in_use: float
    burst: float  # of in_use, lent by KAI beyond the clusters' guarantees
    sampled: bool


def tenant_page(db: Session, principal: Principal, slug: str, chosen: Span) -> dict[str, Any]:
    tenant = access.tenant_for(db, principal, slug, "read")
    report = service.report(db, principal, _filters(chosen, slug))
    labels = _labels(chosen)
    daily = stacked_bars(
        "GPU-hours per day by GPU class",
        f"GPU-hours allocated to {tenant.slug}'s clusters each day (UTC) from "
        f"{labels[0]} to {labels[-1]}, stacked by GPU class. The table below lists the figures.",
        labels, _by_class(report.rows, labels, "allocated_gpu_hours"), "GPU-hours")
    clusters = repository.clusters_now(db, tenant.id)
    classes = _classes_now(db, tenant, clusters)
    return {"tenant": tenant, "span": chosen, "rows": report.rows, "daily_chart": daily,
            "in_use_chart": _in_use_chart(tenant, report.rows, labels),
            "slept_chart": _slept_chart(tenant, report.rows, labels),
            "clusters": clusters, "classes": classes,
            "products": repository.class_products(db, {c.gpu_class_id for c in clusters}),
            "now_chart": _now_chart(tenant, classes),
            "csv_query": chosen.query(tenant=tenant.slug)}


def _in_use_chart(tenant: Tenant, rows: list[UsageRow], labels: list[str]) -> Markup:
    return stacked_bars(
        "GPU-hours in use per day: guaranteed and burst",
        f"GPU-hours bound to {tenant.slug}'s pods each day (UTC) from {labels[0]} to "
        f"{labels[-1]}, all GPU classes: within the clusters' guarantees, and burst, lent by "
        "KAI beyond them from idle GPUs and taken back when another tenant needs its "
        "guarantee. The table below lists the figures.", labels,
        [_total(rows, labels, "guaranteed_gpu_hours", "guaranteed"),
         _total(rows, labels, "burst_gpu_hours", "burst")], "GPU-hours")


def _slept_chart(tenant: Tenant, rows: list[UsageRow], labels: list[str]) -> Markup:
    return stacked_bars(
        "GPU-hours freed by sleep per day by GPU class",
        f"GPU-hours of {tenant.slug}'s cluster guarantees given back to the shared pool while "
        f"the clusters were asleep, each day (UTC) from {labels[0]} to {labels[-1]}, stacked "
        "by GPU class (part of the GPU-hours allocated: the clusters are still held). The "
        "table below lists the figures.", labels,
        _by_class(rows, labels, "slept_gpu_hours"), "GPU-hours")


def _total(rows: list[UsageRow], labels: list[str], field: str, label: str) -> Series:
    by_day = dict.fromkeys(labels, 0.0)
    for row in rows:
        by_day[row.period] += getattr(row, field)
    return Series(label, [round(v, 6) for v in by_day.values()])


def _classes_now(db: Session, tenant: Tenant,
                 clusters: list[repository.ClusterNow]) -> list[ClassNow]:
    approved = repository.approved_now(db, tenant.id)
    bound = repository.bound_now(db, tenant.id)
    class_ids = set(approved) | {c.gpu_class_id for c in clusters}
    products = repository.class_products(db, class_ids)
    found = []
    for class_id in sorted(class_ids, key=lambda c: products[c]):
        mine = [c for c in clusters if c.gpu_class_id == class_id]
        now = bound.get(class_id, BoundGpus(0.0))
        found.append(ClassNow(products[class_id], approved.get(class_id, 0),
                              sum(c.allocated for c in mine), now.gpus, now.burst_gpus,
                              class_id in bound))
    return found


def _now_chart(tenant: Tenant, classes: list[ClassNow]) -> Markup:
    names = [c.gpu_class for c in classes]
    return grouped_bars(
        "GPUs now: approved, allocated, in use and burst",
        f"Per GPU class of {tenant.slug}: GPUs approved as quota, allocated to clusters, "
        "bound to its pods at the last sample, and of those the burst KAI lent beyond the "
        "clusters' guarantees (reclaimable). The table below lists the figures.",
        names, [Series("approved", [float(c.approved) for c in classes]),
                Series("allocated", [float(c.allocated) for c in classes]),
                Series("in use", [c.in_use for c in classes]),
                Series("of which burst", [c.burst for c in classes])], "GPUs")


# ----- the platform admins' page


@dataclass(frozen=True)
class IdleRow:
    tenant: str
    gpu_class: str
    held_gpu_hours: float  # allocated to clusters plus dedicated nodes
    used_gpu_hours: float
    sampled: bool

    @property
    def idle_gpu_hours(self) -> float:
        return round(max(self.held_gpu_hours - self.used_gpu_hours, 0.0), 6)

    @property
    def idle_share(self) -> float:
        return self.idle_gpu_hours / self.held_gpu_hours if self.held_gpu_hours else 0.0


def admin_page(db: Session, principal: Principal, chosen: Span) -> dict[str, Any]:
    authz.ensure_platform_admin(principal)
    report = service.report(db, principal, _filters(chosen, None))
    labels = _labels(chosen)
    return {"span": chosen, "rows": report.rows, "labels": labels, "class_charts": _class_charts(
        db, report.rows, chosen, labels), "idle": _idle(db, report.rows, chosen),
        "csv_query": chosen.query()}


def _hours_elapsed(chosen: Span) -> list[float]:
    now = ledger.now_in_seconds()
    return [max((min(p.end, now) - p.start).total_seconds(), 0.0) / 3600
            for p in service.periods(chosen.start, chosen.end, "day")]


def _mean_gpus(rows: list[UsageRow], labels: list[str], hours: list[float],
               field: str) -> list[float]:
    totals = dict.fromkeys(labels, 0.0)
    for row in rows:
        totals[row.period] += getattr(row, field)
    return [round(totals[label] / h, 3) if h else 0.0 for label, h in zip(labels, hours,
                                                                            strict=True)]


def _class_charts(db: Session, rows: list[UsageRow], chosen: Span,
                  labels: list[str]) -> list[tuple[str, Markup, list[Series]]]:
    capacity = repository.live_capacity(db)
    products = repository.class_products(db, set(capacity))
    hours = _hours_elapsed(chosen)
    charts = []
    for gpu_class in sorted({r.gpu_class for r in rows} | set(products.values())):
        mine = [r for r in rows if r.gpu_class == gpu_class]
        total = next((n for c, n in capacity.items() if products.get(c) == gpu_class), 0)
        series = [Series("capacity (today)", [float(total)] * len(labels)),
                  Series("guaranteed", _mean_gpus(mine, labels, hours, "approved_gpu_hours")),
                  Series("in use", _mean_gpus(mine, labels, hours, "used_gpu_hours")),
                  Series("of which burst", _mean_gpus(mine, labels, hours, "burst_gpu_hours"))]
        chart = lines(f"{gpu_class}: capacity, guaranteed, in use and burst",
                      f"Mean GPUs of {gpu_class} per day (UTC): the capacity of live nodes "
                      "today, the quota guaranteed to tenants, the GPUs running pods "
                      "requested, and of those the burst KAI lent beyond the clusters' "
                      "guarantees. The table below lists the figures.", labels, series, "GPUs")
        charts.append((gpu_class, chart, series))
    return charts


def _idle(db: Session, rows: list[UsageRow], chosen: Span) -> list[IdleRow]:
    held: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        sums = held[(row.tenant, row.gpu_class)]
        sums[0] += row.allocated_gpu_hours + row.dedicated_gpu_hours
        sums[1] += row.used_gpu_hours
    sampled = repository.tenant_slugs(db, repository.sampled_tenants(
        db, int(chosen.start.timestamp()), int(chosen.end.timestamp()))).values()
    found = [IdleRow(tenant, gpu_class, round(h, 6), round(u, 6), tenant in sampled)
             for (tenant, gpu_class), (h, u) in held.items() if h > 0]
    return sorted(found, key=lambda r: (-r.idle_gpu_hours, r.tenant, r.gpu_class))


def visible_slugs(db: Session, principal: Principal) -> list[str]:
    query = access.tenants_visible_to(principal).with_only_columns(Tenant.slug)
    return list(db.scalars(query.order_by(Tenant.slug)))
