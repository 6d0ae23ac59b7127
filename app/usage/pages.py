"""What the usage pages show: the report's rows (as the JSON and CSV give them) shaped into
charts and tables, the current utilisation, and the tenants leaving GPUs idle."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from markupsafe import Markup
from sqlalchemy.orm import Session

from app import authz
from app.auth.principal import Principal
from app.gpu_classes import service as gpu_classes
from app.kit.gpu_units import GrantUnit, share_text, steps
from app.quotas.repository import BoundGpus
from app.tenants import access
from app.tenants.models import Tenant
from app.usage import ledger, repository, service
from app.usage.schemas import UsageFilters, UsageRow
from app.web.charts import palette
from app.web.charts.series import Series, grouped_bars, lines, stacked_bars
from app.web.names import gpu_class_name

DEFAULT_DAYS = 14


@dataclass(frozen=True)
class Span:
    start: datetime
    end: datetime

    def query(self, **extra: str) -> dict[str, str]:
        return {"from": self.start.isoformat(), "to": self.end.isoformat(), **extra}


def span(start: datetime | None, end: datetime | None) -> Span:
    """The pages' range: the last two weeks up to the end of today (UTC) unless given."""
    return Span(*service.asked_range(start, end, DEFAULT_DAYS))


def _filters(chosen: Span, tenant: str | None) -> UsageFilters:
    return UsageFilters(start=chosen.start, end=chosen.end, tenant=tenant, group_by="day")


def _labels(chosen: Span) -> list[str]:
    return [p.label for p in service.periods(chosen.start, chosen.end, "day")]


def class_names(db: Session) -> dict[str, str]:
    """Each class's display name by its product, as the usage rows name classes."""
    return {c.product: c.display_name for c in gpu_classes.all_classes(db)}


def class_styles(db: Session) -> dict[str, tuple[str, str]]:
    """Each class's colour and pattern, the same on every chart of every page."""
    return palette.class_styles((c.id, c.product) for c in gpu_classes.all_classes(db))


def _by_class(db: Session, rows: list[UsageRow], labels: list[str],
              field: str) -> list[Series]:
    values: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(labels, 0.0))
    for row in rows:
        values[row.gpu_class][row.period] += getattr(row, field)
    styles, names = class_styles(db), class_names(db)
    return [Series(gpu_class_name(names.get(gpu_class), gpu_class),
                   [round(v, 6) for v in by_day.values()], *styles.get(gpu_class, (None, None)))
            for gpu_class, by_day in sorted(values.items())]


def _kind(key: str, label: str, values: Sequence[float | None]) -> Series:
    _name, colour, pattern = palette.KINDS[key]
    return Series(label, values, colour, pattern)


# ----- a tenant's page


@dataclass(frozen=True)
class ClassNow:
    """A class's figures now in one unit: whole GPUs, a share of GPUs, or slices of a
    profile (``approved`` and ``allocated`` in the unit's steps)."""

    gpu_class: str
    approved: int
    allocated: int
    in_use: float
    burst: float  # of in_use, lent by KAI beyond the clusters' guarantees
    sampled: bool
    unit: str = "gpu"
    mig_profile: str = ""

    def _said(self, amount: int) -> str:
        if self.unit == "gpu":
            return str(amount)
        return steps(GrantUnit(repository.cast_unit(self.unit), self.mig_profile), amount)

    @property
    def approved_text(self) -> str:
        return self._said(self.approved)

    @property
    def allocated_text(self) -> str:
        """The number alone, before "of <approved>": "2", "0.25", "3"."""
        return share_text(self.allocated) if self.unit == "share" else str(self.allocated)

    @property
    def counted_in(self) -> str:
        return " slices" if self.unit == "mig" else ""


def tenant_page(db: Session, principal: Principal, slug: str, chosen: Span) -> dict[str, Any]:
    tenant = access.tenant_for(db, principal, slug, "read")
    report = service.report(db, principal, _filters(chosen, slug))
    labels = _labels(chosen)
    so_far = _so_far(chosen, labels)
    daily = stacked_bars(
        "GPU-hours allocated to clusters per day (UTC), by GPU class" + so_far,
        f"GPU-hours allocated to {tenant.slug}'s clusters each day (UTC) from "
        f"{labels[0]} to {labels[-1]}, stacked by GPU class. The table below lists the figures.",
        labels, _by_class(db, report.rows, labels, "allocated_gpu_hours"), "GPU-hours")
    clusters = repository.clusters_now(db, tenant.id)
    classes = _classes_now(db, tenant, clusters)
    return {"tenant": tenant, "span": chosen, "rows": report.rows, "daily_chart": daily,
            "in_use_chart": _in_use_chart(tenant, report.rows, labels, so_far),
            "slept_chart": _slept_chart(db, tenant, report.rows, labels, so_far),
            "clusters": clusters, "classes": classes,
            "products": repository.class_products(db, {c.gpu_class_id for c in clusters}),
            "now_chart": _now_chart(tenant, classes, class_names(db)),
            "class_names": class_names(db),
            "csv_query": chosen.query(tenant=tenant.slug)}


def _so_far(chosen: Span, labels: list[str]) -> str:
    """What a daily chart's title says of a day under way in its range: its hours so far."""
    today = _today(chosen)
    return "" if today is None else f"; {labels[today]}: so far"


def _in_use_chart(tenant: Tenant, rows: list[UsageRow], labels: list[str],
                  so_far: str) -> Markup:
    return stacked_bars(
        "GPU-hours in use per day (UTC): guaranteed and burst, all GPU classes" + so_far,
        f"GPU-hours bound to {tenant.slug}'s pods each day (UTC) from {labels[0]} to "
        f"{labels[-1]}, all GPU classes: within the clusters' guarantees, and burst, lent by "
        "KAI beyond them from idle GPUs and taken back when another tenant needs its "
        "guarantee. The table below lists the figures.", labels,
        [_total(rows, labels, "guaranteed_gpu_hours", "guaranteed"),
         _total(rows, labels, "burst_gpu_hours", "burst")], "GPU-hours")


def _slept_chart(db: Session, tenant: Tenant, rows: list[UsageRow],
                 labels: list[str], so_far: str) -> Markup:
    return stacked_bars(
        "GPU-hours freed by sleep per day (UTC), by GPU class" + so_far,
        f"GPU-hours of {tenant.slug}'s cluster guarantees given back to the shared pool while "
        f"the clusters were asleep, each day (UTC) from {labels[0]} to {labels[-1]}, stacked "
        "by GPU class (part of the GPU-hours allocated: the clusters are still held). The "
        "table below lists the figures.", labels,
        _by_class(db, rows, labels, "slept_gpu_hours"), "GPU-hours")


def _total(rows: list[UsageRow], labels: list[str], field: str, label: str) -> Series:
    by_day = dict.fromkeys(labels, 0.0)
    for row in rows:
        by_day[row.period] += getattr(row, field)
    return _kind(label, label, [round(v, 6) for v in by_day.values()])


_UNIT_ORDER = {"gpu": 0, "share": 1, "mig": 2}


def _classes_now(db: Session, tenant: Tenant,
                 clusters: list[repository.ClusterNow]) -> list[ClassNow]:
    """A row per class and unit the tenant holds quota or clusters in."""
    approved = repository.approved_in_units(db, tenant.id)
    bound = repository.bound_in_units(db, tenant.id)
    keys = set(approved) | {(c.gpu_class_id, c.unit, c.mig_profile) for c in clusters}
    products = repository.class_products(db, {key[0] for key in keys})
    found = []
    for key in sorted(keys, key=lambda k: (products[k[0]], _UNIT_ORDER.get(k[1], 3), k[2])):
        class_id, unit, profile = key
        mine = [c for c in clusters if (c.gpu_class_id, c.unit, c.mig_profile) == key]
        now = bound.get(key, BoundGpus(0.0))
        found.append(ClassNow(products[class_id], approved.get(key, 0),
                              sum(c.allocated if unit == "gpu" else c.amount for c in mine),
                              now.gpus, now.burst_gpus, key in bound, unit, profile))
    return found


def _now_chart(tenant: Tenant, every: list[ClassNow], names_of: dict[str, str]) -> Markup:
    """Whole GPUs only: a share and slices are in the table below."""
    classes = [c for c in every if c.unit == "gpu"]
    names = [gpu_class_name(names_of.get(c.gpu_class), c.gpu_class) for c in classes]
    return grouped_bars(
        "GPUs now per GPU class: approved, allocated, in use and burst",
        f"Per GPU class of {tenant.slug}: GPUs approved as quota, allocated to clusters, "
        "bound to its pods at the last sample, and of those the burst KAI lent beyond the "
        "clusters' guarantees (reclaimable). The table below lists the figures.",
        names, [_kind("approved", "approved", [float(c.approved) for c in classes]),
                _kind("allocated", "allocated", [float(c.allocated) for c in classes]),
                _kind("in-use", "in use", [c.in_use for c in classes]),
                _kind("burst", "of which burst", [c.burst for c in classes])], "GPUs")


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
        "class_names": class_names(db), "csv_query": chosen.query()}


def _hours_elapsed(chosen: Span) -> list[float]:
    now = ledger.now_in_seconds()
    return [max((min(p.end, now) - p.start).total_seconds(), 0.0) / 3600
            for p in service.periods(chosen.start, chosen.end, "day")]


def _mean_gpus(rows: list[UsageRow], labels: list[str], hours: list[float],
               field: str) -> list[float | None]:
    totals = dict.fromkeys(labels, 0.0)
    for row in rows:
        totals[row.period] += getattr(row, field)
    return [round(totals[label] / h, 3) if h else 0.0 for label, h in zip(labels, hours,
                                                                            strict=True)]


def _class_charts(db: Session, rows: list[UsageRow], chosen: Span,
                  labels: list[str]) -> list[tuple[str, Markup, list[Series]]]:
    hours = _hours_elapsed(chosen)
    capacity = _capacity_by_day(db, chosen)
    today = _today(chosen)
    levels = _levels_now(db) if today is not None else {}
    names = class_names(db)
    charts = []
    for gpu_class in sorted({r.gpu_class for r in rows} | set(capacity) | set(levels)):
        name = gpu_class_name(names.get(gpu_class), gpu_class)
        mine = [r for r in rows if r.gpu_class == gpu_class]
        figures = [capacity.get(gpu_class, [None] * len(labels)),
                   _mean_gpus(mine, labels, hours, "approved_gpu_hours"),
                   _mean_gpus(mine, labels, hours, "used_gpu_hours"),
                   _mean_gpus(mine, labels, hours, "burst_gpu_hours")]
        if today is not None:
            for values, level in zip(figures, levels.get(gpu_class, _NO_LEVELS), strict=True):
                values[today] = level
        series = [_kind(key, label, values) for (key, label), values
                  in zip(_CLASS_SERIES, figures, strict=True)]
        chart = lines(f"{name}: mean GPUs per day (UTC), today now",
                      f"Mean GPUs of {name} per day (UTC): the capacity, GPUs on the "
                      "nodes the inventory saw that day, over the part of the day it knew the "
                      "class (none drawn before it first saw a node of it), "
                      "the quota guaranteed to tenants, the GPUs running pods requested, and "
                      "of those the burst KAI lent beyond the clusters' guarantees. Today is "
                      "not over: its point is the level now (the nodes there now, the quota "
                      "approved now, the GPUs bound at the last sample), not a mean.",
                      labels, series, "GPUs")
        charts.append((gpu_class, chart, series))
    return charts


_CLASS_SERIES = (("capacity", "capacity"), ("guaranteed", "guaranteed"), ("in-use", "in use"),
                 ("burst", "of which burst"))
_NO_LEVELS: tuple[float | None, ...] = (None, 0.0, None, None)


def _today(chosen: Span) -> int | None:
    """The index of the day under way in the range, if it is in it."""
    now = ledger.now_in_seconds()
    return next((n for n, p in enumerate(service.periods(chosen.start, chosen.end, "day"))
                 if p.start <= now < p.end), None)


def _levels_now(db: Session) -> dict[str, tuple[float | None, ...]]:
    """Per class product: GPUs on the nodes there now, approved to tenants now, and bound to
    pods and of those burst at the last sample (None: no host reported the class yet)."""
    now = ledger.now_in_seconds()
    capacity: dict[int, float] = defaultdict(float)
    for node in repository.node_spans(db, now):
        if node.gone_at is None and service.as_utc(node.first_seen_at) <= now:
            capacity[node.gpu_class_id] += node.gpus
    approved, bound = repository.approved_now(db, None), repository.bound_now(db, None)
    class_ids = set(capacity) | set(approved) | set(bound)
    products = repository.class_products(db, class_ids)
    return {products[c]: (capacity.get(c), float(approved.get(c, 0)),
                          bound[c].gpus if c in bound else None,
                          bound[c].burst_gpus if c in bound else None)
            for c in class_ids}


def _capacity_by_day(db: Session, chosen: Span) -> dict[str, list[float | None]]:
    """Mean GPUs on each class's nodes per day, from when the inventory first saw each node
    until it went; ``None`` for a day on which no node of the class was there (or to come)."""
    now = ledger.now_in_seconds()
    spans = repository.node_spans(db, chosen.start)
    products = repository.class_products(db, {s.gpu_class_id for s in spans})
    days = service.periods(chosen.start, chosen.end, "day")
    found: dict[str, list[float | None]] = {}
    for product in set(products.values()):
        mine = [s for s in spans if products[s.gpu_class_id] == product]
        found[product] = [_mean_on(mine, day.start, min(day.end, now)) for day in days]
    return found


def _mean_on(spans: list[repository.NodeSpan], start: datetime,
             end: datetime) -> float | None:
    """Mean GPUs from ``start`` (or from when the first node came, if later) to ``end``."""
    gpu_seconds, known_from = 0.0, None
    for span_ in spans:
        since = service.as_utc(span_.first_seen_at)
        until = service.as_utc(span_.gone_at) if span_.gone_at else end
        overlap = (min(until, end) - max(since, start)).total_seconds()
        if overlap > 0:
            gpu_seconds += span_.gpus * overlap
            came = max(since, start)
            known_from = came if known_from is None else min(known_from, came)
    if known_from is None or end <= known_from:
        return None
    return round(gpu_seconds / (end - known_from).total_seconds(), 3)


def _idle(db: Session, rows: list[UsageRow], chosen: Span) -> list[IdleRow]:
    held: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        sums = held[(row.tenant, row.gpu_class)]
        sums[0] += row.shared_pool_gpu_hours + row.dedicated_gpu_hours
        sums[1] += row.used_gpu_hours
    sampled = repository.tenant_slugs(db, repository.sampled_tenants(
        db, int(chosen.start.timestamp()), int(chosen.end.timestamp()))).values()
    found = [IdleRow(tenant, gpu_class, round(h, 6), round(u, 6), tenant in sampled)
             for (tenant, gpu_class), (h, u) in held.items() if h > 0]
    return sorted(found, key=lambda r: (-r.idle_gpu_hours, r.tenant, r.gpu_class))


def visible_slugs(db: Session, principal: Principal) -> list[str]:
    query = access.tenants_visible_to(principal).with_only_columns(Tenant.slug)
    return list(db.scalars(query.order_by(Tenant.slug)))
