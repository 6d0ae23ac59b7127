"""GPU-hour reports: who may see which tenant's usage, the periods, and the rows.

A row is per tenant, class, unit and MIG profile (and cluster). Its ``*_gpu_hours`` are
GPU-hours: whole GPUs, and shares as the fractions of a GPU they are (the ledger's hundredths
times seconds, divided once by 100 times 3600); 0 on a row of MIG slices, whose hours are
``*_slice_hours`` (slices times hours).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.errors import ValidationFailed
from app.tenants import access
from app.tenants.models import Tenant
from app.usage import ledger, repository
from app.usage.repository import Period, SecondsRow
from app.usage.schemas import (
    ClusterUsageReport,
    ClusterUsageRow,
    GroupBy,
    UsageFilters,
    UsageReport,
    UsageRow,
)

# Days are kept hourly for 400 days; months go back ten years.
MAX_RANGE = {"day": timedelta(days=400), "month": timedelta(days=3660)}
KINDS = ("quota", "cluster", repository.DEDICATED_CLUSTER, "node", "sleep", "used", "burst",
         "utilised", "known")
# Per cluster: what it held, and of that what sleep freed.
CLUSTER_LEDGER_KINDS = ("cluster", repository.DEDICATED_CLUSTER, "sleep")
LEDGER_KINDS = ("quota", "cluster", repository.DEDICATED_CLUSTER, "node", "sleep")
# How many of the ledger's steps make one GPU, per unit; MIG slices make none.
STEPS_PER_GPU = {"gpu": 1, "share": 100}
# The unit as the reports name it.
UNIT_NAMES = {"gpu": "gpu", "share": "shared", "mig": "mig"}
# (period, tenant id, class id, unit, MIG profile)
RowKey = tuple[int, int, int, str, str]


@dataclass(frozen=True)
class LabelledPeriod:
    label: str
    start: datetime
    end: datetime

    def seconds(self) -> Period:
        return Period(int(self.start.timestamp()), int(self.end.timestamp()))


def as_utc(moment: datetime) -> datetime:
    """Naive datetimes in a query string mean UTC; sub-second parts are dropped."""
    aware = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return aware.replace(microsecond=0)


# Reports are cut into UTC days and months: the calendar must hold the period after the last
# one, and nothing was kept before the Unix epoch.
REPORT_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
REPORT_LATEST = datetime(9999, 1, 1, tzinfo=UTC)


def reportable(field: str, moment: datetime) -> datetime:
    """``moment`` in UTC, refused (422) outside the years a report can cover."""
    moment = as_utc(moment)
    if not REPORT_EARLIEST <= moment <= REPORT_LATEST:
        raise ValidationFailed.on_field(
            field, f"'{field}' must lie between 1970-01-01 and 9999-01-01 (UTC)")
    return moment


def asked_range(start: datetime | None, end: datetime | None,
                default_days: int) -> tuple[datetime, datetime]:
    """The range a report was asked for: to the end of today (UTC) and ``default_days``
    before its end unless given, each checked before any arithmetic on it."""
    if end is None:
        today = ledger.now_in_seconds().replace(hour=0, minute=0, second=0)
        end = today + timedelta(days=1)
    end = reportable("to", end)
    start = reportable("from", start) if start else end - timedelta(days=default_days)
    return start, end


def check_range(start: datetime, end: datetime, group_by: GroupBy) -> None:
    if start >= end:
        raise ValidationFailed.on_field("from", "'from' must be before 'to'")
    if end - start > MAX_RANGE[group_by]:
        raise ValidationFailed.on_field(
            "to", f"a report by {group_by} spans at most {MAX_RANGE[group_by].days} days")


def periods(start: datetime, end: datetime, group_by: GroupBy) -> list[LabelledPeriod]:
    """UTC days or months from ``start`` to ``end``, the first and last cut to the range."""
    found = []
    for boundary, label in _boundaries(start, group_by):
        following = _next(boundary, group_by)
        if boundary >= end:
            break
        found.append(LabelledPeriod(label, max(boundary, start), min(following, end)))
    return found


def _boundaries(start: datetime, group_by: GroupBy) -> Iterator[tuple[datetime, str]]:
    boundary = start.replace(hour=0, minute=0, second=0, microsecond=0)
    if group_by == "month":
        boundary = boundary.replace(day=1)
    while True:
        label = boundary.strftime("%Y-%m-%d" if group_by == "day" else "%Y-%m")
        yield boundary, label
        boundary = _next(boundary, group_by)


def _next(boundary: datetime, group_by: GroupBy) -> datetime:
    if group_by == "day":
        return boundary + timedelta(days=1)
    year, month = divmod(boundary.month, 12)
    return boundary.replace(year=boundary.year + year, month=month + 1)


def visible_tenant_ids(db: Session, principal: Principal, slug: str | None) -> Any:
    """The tenants a report covers: the one asked for (404 if hidden), else all visible."""
    if slug:
        return [access.tenant_for(db, principal, slug, "read").id]
    if principal.is_platform_admin:
        return None
    return access.tenants_visible_to(principal).with_only_columns(Tenant.id)


def report(db: Session, principal: Principal, filters: UsageFilters) -> UsageReport:
    start, end, tenant_ids = _range(db, principal, filters)
    rows = usage_rows(db, periods(start, end, filters.group_by), tenant_ids)
    return UsageReport(start=start, end=end, group_by=filters.group_by, tenant=filters.tenant,
                       rows=rows)


def _range(db: Session, principal: Principal,
           filters: UsageFilters) -> tuple[datetime, datetime, Any]:
    """The filters' range, checked, and the tenants the principal may see in it."""
    start, end = as_utc(filters.start), as_utc(filters.end)
    check_range(start, end, filters.group_by)
    return start, end, visible_tenant_ids(db, principal, filters.tenant)


def usage_rows(db: Session, labelled: list[LabelledPeriod], tenant_ids: Any) -> list[UsageRow]:
    spans = [p.seconds() for p in labelled]
    now_s = int(ledger.now_in_seconds().timestamp())
    found = (repository.allocated_seconds(db, spans, now_s, tenant_ids=tenant_ids)
             + repository.used_seconds(db, spans, now_s, tenant_ids=tenant_ids))
    sums: dict[RowKey, dict[str, float]] = {}
    for row in found:
        kinds = sums.setdefault((row.period, row.tenant_id, row.gpu_class_id, row.unit,
                                 row.mig_profile), dict.fromkeys(KINDS, 0.0))
        kinds[row.kind] += row.seconds
    slugs = repository.tenant_slugs(db, {key[1] for key in sums})
    products = repository.class_products(db, {key[2] for key in sums})
    rows = [_row(labelled[n], slugs[tenant], products[gpu_class], unit, profile, kinds)
            for (n, tenant, gpu_class, unit, profile), kinds in sums.items()
            if any(kinds.values())]
    return sorted(rows, key=lambda r: (r.period_start, r.tenant, r.gpu_class, r.unit,
                                       r.mig_profile))


def cluster_report(db: Session, principal: Principal,
                   filters: UsageFilters) -> ClusterUsageReport:
    """The same range per cluster: what each was given and used, guaranteed and burst, and
    what of what it was given sleep freed."""
    start, end, tenant_ids = _range(db, principal, filters)
    labelled = periods(start, end, filters.group_by)
    spans = [p.seconds() for p in labelled]
    now_s = int(ledger.now_in_seconds().timestamp())
    found = [row for row in repository.allocated_seconds(db, spans, now_s, tenant_ids=tenant_ids,
                                                         by_cluster=True)
             if row.kind in CLUSTER_LEDGER_KINDS]
    found += repository.used_seconds(db, spans, now_s, tenant_ids=tenant_ids, by_cluster=True)
    sums: dict[tuple[int, int, int, int, str, str], dict[str, float]] = {}
    for row in found:
        if row.cluster_id is not None:
            key = (row.period, row.tenant_id, row.gpu_class_id, row.cluster_id, row.unit,
                   row.mig_profile)
            sums.setdefault(key, dict.fromkeys(KINDS, 0.0))[row.kind] += row.seconds
    slugs = repository.tenant_slugs(db, {key[1] for key in sums})
    products = repository.class_products(db, {key[2] for key in sums})
    names = repository.cluster_names(db, {key[3] for key in sums})
    rows = [_cluster_row(labelled[n], slugs[tenant], names.get(cluster, str(cluster)),
                         products[gpu_class], unit, profile, kinds)
            for (n, tenant, gpu_class, cluster, unit, profile), kinds in sums.items()
            if any(kinds.values())]
    rows.sort(key=lambda r: (r.period_start, r.tenant, r.cluster, r.gpu_class))
    return ClusterUsageReport(start=start, end=end, group_by=filters.group_by,
                              tenant=filters.tenant, rows=rows)


def in_steps(unit: str, seconds: dict[str, float]) -> tuple[dict[str, float], int]:
    """A row's seconds in steps of a GPU, and how many steps make one: the ledger's are
    (hundredths of a share: integers, which the hours divide once), the samples' fractions of
    a GPU are scaled to them; no GPU-seconds at all on a MIG row."""
    steps = STEPS_PER_GPU.get(unit)
    if steps is None:
        return dict.fromkeys(seconds, 0.0), 1
    return {kind: value if kind in LEDGER_KINDS else value * steps
            for kind, value in seconds.items()}, steps


def slice_hours(unit: str, seconds: float) -> float:
    """Slice-hours of a MIG row (slices times hours); 0 on every other."""
    return hours(seconds) if unit == "mig" else 0.0


def _unit_fields(unit: str, profile: str, seconds: dict[str, float]) -> dict[str, Any]:
    return {"unit": UNIT_NAMES.get(unit, unit), "mig_profile": profile,
            "approved_slice_hours": slice_hours(unit, seconds["quota"]),
            "allocated_slice_hours": slice_hours(unit, _allocated(seconds)),
            "used_slice_hours": slice_hours(unit, seconds["used"])}


def _cluster_row(period: LabelledPeriod, tenant: str, cluster: str, gpu_class: str, unit: str,
                 profile: str, raw: dict[str, float]) -> ClusterUsageRow:
    """A cluster's approved slice-hours are those it held, as its allocated GPU-hours are."""
    seconds, steps = in_steps(unit, raw)
    used, burst = hours(seconds["used"], steps), hours(seconds["burst"], steps)
    utilised, coverage = utilisation(seconds, steps)
    return ClusterUsageRow(
        tenant=tenant, cluster=cluster, gpu_class=gpu_class, period=period.label,
        period_start=period.start, period_end=period.end,
        allocated_gpu_hours=hours(_allocated(seconds), steps), used_gpu_hours=used,
        guaranteed_gpu_hours=round(used - burst, 6), burst_gpu_hours=burst,
        slept_gpu_hours=hours(seconds["sleep"], steps), utilised_gpu_hours=utilised,
        utilisation_coverage=coverage,
        **_unit_fields(unit, profile, {**raw, "quota": _allocated(raw)}))


def _row(period: LabelledPeriod, tenant: str, gpu_class: str, unit: str, profile: str,
         raw: dict[str, float]) -> UsageRow:
    seconds, steps = in_steps(unit, raw)
    used, burst = hours(seconds["used"], steps), hours(seconds["burst"], steps)
    utilised, coverage = utilisation(seconds, steps)
    return UsageRow(
        tenant=tenant, gpu_class=gpu_class, period=period.label,
        period_start=period.start, period_end=period.end,
        approved_gpu_hours=hours(seconds["quota"], steps),
        allocated_gpu_hours=hours(_allocated(seconds), steps),
        shared_pool_gpu_hours=hours(seconds["cluster"], steps),
        dedicated_gpu_hours=hours(seconds["node"], steps),
        used_gpu_hours=used, guaranteed_gpu_hours=round(used - burst, 6),
        burst_gpu_hours=burst, allocated_gpu_seconds=round(_allocated(seconds) / steps),
        slept_gpu_hours=hours(seconds["sleep"], steps), utilised_gpu_hours=utilised,
        utilisation_coverage=coverage, **_unit_fields(unit, profile, raw))


def utilisation(seconds: dict[str, float],
                steps: int = 1) -> tuple[float | None, float | None]:
    """The utilised GPU-hours (0 when no GPU was in use; None, unknown, when some were but
    utilisation was never known for them), and the share of the GPU-hours in use they cover
    (None when none was in use)."""
    used, known = seconds["used"], seconds["known"]
    if used <= 0:
        return 0.0, None
    return (hours(seconds["utilised"], steps) if known > 0 else None,
            round(min(known / used, 1.0), 6))


def _allocated(seconds: dict[str, float]) -> float:
    """Every cluster's GPU-seconds: shared-pool and dedicated-nodes clusters'."""
    return seconds["cluster"] + seconds[repository.DEDICATED_CLUSTER]


def gpus_in_use_by_class(db: Session, tenant_id: int) -> dict[int, float]:
    """GPUs bound to a tenant's pods now per class, over all regions (the caller has
    authorized the tenant); a class no host has reported for yet is absent."""
    return {class_id: bound.gpus for class_id, bound in repository.bound_now(db, tenant_id).items()}


def hours(seconds: float, steps: int = 1) -> float:
    """Hours of ``seconds`` counted in ``steps`` per GPU (100 for a share's hundredths)."""
    return round(seconds / (3600 * steps), 6)


def seconds_by_cluster(db: Session, principal: Principal, slug: str, start: datetime,
                       end: datetime) -> list[SecondsRow]:
    """A tenant's allocated GPU-seconds per cluster over one span."""
    tenant_ids = visible_tenant_ids(db, principal, slug)
    span = Period(int(as_utc(start).timestamp()), int(as_utc(end).timestamp()))
    now_s = int(ledger.now_in_seconds().timestamp())
    rows = repository.allocated_seconds(db, [span], now_s, tenant_ids=tenant_ids,
                                        by_cluster=True)
    return [row for row in rows if row.kind in ("cluster", repository.DEDICATED_CLUSTER)]
