"""SQL for GPU-seconds: the ledger's intervals and the samples' hourly means, summed per period.

The database does the sums: a ledger entry's interval ends where the next entry of its series
begins (a window function), each interval is clipped to each period it overlaps, and only the
sums per tenant, class, unit, MIG profile and period come back. All times are whole Unix
seconds.

Seconds are in the unit's steps (app.kit.gpu_units): the ledger's are whole GPUs, slices or
hundredths of a GPU times seconds (integers: the report divides once); the samples' are GPUs
(a share's as fractions) or slices times seconds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    BindParameter,
    ColumnElement,
    Select,
    and_,
    bindparam,
    case,
    func,
    literal,
    or_,
    select,
    text,
    union_all,
)
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from app.gpu_classes.models import GpuClass
from app.kit.gpu_units import GrantUnit, UnitKind, steps
from app.nodes.models import Node
from app.quotas.models import GpusInUse, TenantQuota
from app.quotas.repository import BoundGpus
from app.tenants.models import Tenant
from app.usage.models import HourlyUsage, LedgerEntry, UsageSample
from app.usage.samples import known_gpus, sample_spans

HOUR = 3600


def cast_unit(unit: str) -> UnitKind:
    return "mig" if unit == "mig" else "share" if unit == "share" else "gpu"


DEDICATED = "dedicated-nodes"
DEDICATED_CLUSTER = "dedicated_cluster"
# GPUs bound: KAI's allocation to a shared-pool cluster's queue, and the running pods on a
# dedicated node. (A namespace's ResourceQuota counts its pods waiting for GPUs too.)
USED_SOURCES = ("queue", "node")

# The sums of used_seconds' selects, by kind, after their six keys.
USED_KINDS = (("used", 6), ("burst", 7), ("utilised", 8), ("known", 9))


@dataclass(frozen=True)
class Period:
    start_s: int
    end_s: int


@dataclass(frozen=True)
class SecondsRow:
    period: int  # index into the periods asked for
    tenant_id: int
    gpu_class_id: int
    # quota, cluster (shared-pool, or placement unknown), dedicated_cluster, node, sleep, used,
    # burst (part of used), utilised (used weighted by utilisation) or known (the part of used
    # with a utilisation figure)
    kind: str
    cluster_id: int | None
    seconds: float
    unit: str = "gpu"
    mig_profile: str = ""


# The periods a report is cut into, as one JSON parameter the database unpacks, so that a
# report's statements have one shape whatever its range, and SQLAlchemy compiles each once. A
# SELECT per period (a UNION ALL) took SQLAlchemy 0.4 ms a period to compile on every request,
# 180 ms for a report of 400 days that found nothing; a VALUES list, about as long
# (bench/usage_report.py).
_PERIODS = {
    "postgresql": "SELECT p.n, p.start_s, p.end_s FROM json_to_recordset(CAST(:periods AS json))"
                  " AS p(n bigint, start_s bigint, end_s bigint)",
    "sqlite": "SELECT json_extract(value, '$.n') AS n, json_extract(value, '$.start_s') AS "
              "start_s, json_extract(value, '$.end_s') AS end_s FROM json_each(:periods)",
}


def _periods_table(db: Session, numbered: Sequence[tuple[int, Period]],
                   name: str = "periods") -> Any:
    """The periods with their numbers in the report (``n``)."""
    rows = json.dumps([{"n": n, "start_s": p.start_s, "end_s": p.end_s} for n, p in numbered])
    statement = text(_PERIODS[db.get_bind().dialect.name]).bindparams(periods=rows)
    return statement.columns(n=BigInteger, start_s=BigInteger, end_s=BigInteger).cte(name)


def _seconds(value: int) -> ColumnElement[int]:
    """Seconds since the epoch as a bound value: a plain int compared with an expression is
    bound as a 32-bit INTEGER, which ends in January 2038."""
    return literal(value, BigInteger)


def _overlap(start: Any, end: Any, period: Any) -> ColumnElement[Any]:
    low = case((start > period.c.start_s, start), else_=period.c.start_s)
    high = case((end < period.c.end_s, end), else_=period.c.end_s)
    return high - low


def _ledger_intervals(tenant_ids: Any, until_s: ColumnElement[int]) -> Any:
    series = (LedgerEntry.kind, LedgerEntry.subject_id, LedgerEntry.tenant_id,
              LedgerEntry.gpu_class_id, LedgerEntry.unit, LedgerEntry.mig_profile)
    following = func.lead(LedgerEntry.at_s).over(partition_by=series,
                                                 order_by=(LedgerEntry.at_s, LedgerEntry.id))
    # A dedicated-nodes cluster's GPU-hours are on the tenant's dedicated nodes: a kind apart.
    kind = case((and_(LedgerEntry.kind == "cluster", LedgerEntry.placement == DEDICATED),
                  literal(DEDICATED_CLUSTER)), else_=LedgerEntry.kind)
    # Whole GPUs are ``gpus`` (as before the units); slices and hundredths are ``amount``.
    held = case((LedgerEntry.unit == "gpu", LedgerEntry.gpus), else_=LedgerEntry.amount)
    query = select(kind.label("kind"), LedgerEntry.tenant_id, LedgerEntry.gpu_class_id,
                   LedgerEntry.unit, LedgerEntry.mig_profile,
                   LedgerEntry.cluster_id, held.label("gpus"),
                   LedgerEntry.at_s.label("start_s"), following.label("end_s")
                   ).where(LedgerEntry.at_s < until_s)
    if tenant_ids is not None:
        query = query.where(LedgerEntry.tenant_id.in_(tenant_ids))
    return query.subquery("intervals")


def allocated_seconds(db: Session, periods: Sequence[Period], now_s: int, *,
                      tenant_ids: Any = None, by_cluster: bool = False) -> list[SecondsRow]:
    """Seconds held per period, tenant, class, unit, profile and kind (and cluster, if
    asked), in the unit's steps."""
    if not periods:
        return []
    cap = _seconds(min(now_s, periods[-1].end_s))
    period = _periods_table(db, list(enumerate(periods)))
    spans = _ledger_intervals(tenant_ids, cap)
    ended = func.coalesce(spans.c.end_s, cap)
    end = case((ended < cap, ended), else_=cap)
    cluster = spans.c.cluster_id if by_cluster else literal(None).label("cluster_id")
    keys = [period.c.n, spans.c.tenant_id, spans.c.gpu_class_id, spans.c.kind, spans.c.unit,
            spans.c.mig_profile]
    query = (select(*keys, cluster, func.sum(spans.c.gpus * _overlap(spans.c.start_s, end, period)))
             .join_from(spans, period, and_(spans.c.start_s < period.c.end_s,
                                            end > period.c.start_s))
             # Intervals over before the range are dropped before pairing with the periods.
             .where(spans.c.gpus > 0, end > _seconds(periods[0].start_s))
             .group_by(*keys, *([spans.c.cluster_id] if by_cluster else [])))
    return [SecondsRow(int(row[0]), row[1], row[2], row[3], row[6], float(row[7] or 0),
                       unit=row[4], mig_profile=row[5])
            for row in db.execute(query)]


def used_seconds(db: Session, periods: Sequence[Period], now_s: int, *,
                 tenant_ids: Any = None, by_cluster: bool = False) -> list[SecondsRow]:
    """GPU-seconds in use (``used``), of those burst (``burst``), utilised (``utilised``: each
    GPU weighted by its utilisation) and with a utilisation figure (``known``) per period,
    tenant and class: each raw sample over the span it stands for (up to now), and the folded
    hours' integrals. ``by_cluster``: per cluster too, from the clusters' queues only (dedicated
    nodes' pods belong to no cluster's queue)."""
    if not periods:
        return []
    cap = _seconds(min(now_s, periods[-1].end_s))
    sources = ("queue",) if by_cluster else USED_SOURCES
    period = _periods_table(db, list(enumerate(periods)))
    hour_keys = [period.c.n, HourlyUsage.tenant_id, HourlyUsage.gpu_class_id,
                 HourlyUsage.unit, HourlyUsage.mig_profile,
                 HourlyUsage.subject_id if by_cluster else literal(None).label("subject_id")]
    folded = (select(*hour_keys, func.sum(HourlyUsage.used_gpu_seconds).label("seconds"),
                     func.sum(HourlyUsage.burst_gpu_seconds).label("burst_seconds"),
                     func.sum(HourlyUsage.utilised_gpu_seconds).label("utilised_seconds"),
                     func.sum(HourlyUsage.utilisation_known_seconds).label("known_seconds"))
              .join_from(HourlyUsage, period, and_(HourlyUsage.hour_s >= period.c.start_s,
                                                   HourlyUsage.hour_s < period.c.end_s))
              .where(HourlyUsage.source.in_(sources),
                     HourlyUsage.gpu_class_id.is_not(None), HourlyUsage.hour_s < cap)
              .group_by(*hour_keys[:5], *hour_keys[5:] if by_cluster else ()))
    if tenant_ids is not None:
        folded = folded.where(HourlyUsage.tenant_id.in_(tenant_ids))
    raw = _raw_use(db, periods, cap, tenant_ids, sources, by_cluster)
    rows = db.execute(folded if raw is None else union_all(raw, folded)).all()
    return [SecondsRow(int(row[0]), row[1], row[2], kind, row[5], float(row[column] or 0),
                       unit=row[3], mig_profile=row[4])
            for row in rows for kind, column in USED_KINDS]


def _raw_use(db: Session, periods: Sequence[Period], cap: ColumnElement[int], tenant_ids: Any,
             sources: Sequence[str], by_cluster: bool) -> Any:
    """The raw samples' part of ``used_seconds``, paired only with the periods their spans
    can reach: raw samples cover the last two days, and pairing each of their spans with each
    of 400 days cost PostgreSQL 100 ms (a nested loop; nothing else joins on a range)."""
    reach = select(func.min(UsageSample.taken_s),
                   func.max(UsageSample.taken_s + UsageSample.holds_s)).where(
        UsageSample.source.in_(sources))
    if tenant_ids is not None:
        reach = reach.where(UsageSample.tenant_id.in_(tenant_ids))
    first_s, last_s = db.execute(reach).one()
    if first_s is None:
        return None
    reached = [(n, p) for n, p in enumerate(periods) if p.end_s > first_s and p.start_s < last_s]
    if not reached:
        return None
    period = _periods_table(db, reached, "raw_periods")
    spans = sample_spans(tenant_ids=tenant_ids, sources=sources)
    end = case((spans.c.end_s < cap, spans.c.end_s), else_=cap)
    keys = [period.c.n, spans.c.tenant_id, spans.c.gpu_class_id, spans.c.unit,
            spans.c.mig_profile,
            spans.c.subject_id if by_cluster else literal(None).label("subject_id")]
    overlap = _overlap(spans.c.start_s, end, period)
    return (select(*keys, func.sum(spans.c.used_gpus * overlap).label("seconds"),
                   func.sum(spans.c.burst_gpus * overlap).label("burst_seconds"),
                   func.sum(spans.c.utilised_gpus * overlap).label("utilised_seconds"),
                   func.sum(known_gpus(spans) * overlap).label("known_seconds"))
            .join_from(spans, period, and_(spans.c.start_s < period.c.end_s,
                                           end > period.c.start_s))
            .where(spans.c.gpu_class_id.is_not(None), spans.c.start_s < cap)
            .group_by(*keys[:5], *keys[5:] if by_cluster else ()))


def cluster_names(db: Session, cluster_ids: set[int]) -> dict[int, str]:
    """The names the ledger recorded for the clusters (a deleted cluster's too)."""
    rows = db.execute(select(LedgerEntry.cluster_id, func.max(LedgerEntry.cluster_name))
                      .where(LedgerEntry.cluster_id.in_(cluster_ids))
                      .group_by(LedgerEntry.cluster_id))
    return {row[0]: row[1] for row in rows if row[0] is not None}


def tenant_slugs(db: Session, tenant_ids: set[int]) -> dict[int, str]:
    rows = db.execute(select(Tenant.id, Tenant.slug).where(Tenant.id.in_(tenant_ids)))
    return {row.id: row[1] for row in rows}


def class_products(db: Session, class_ids: set[int]) -> dict[int, str]:
    rows = db.execute(select(GpuClass.id, GpuClass.product).where(GpuClass.id.in_(class_ids)))
    return {row.id: row[1] for row in rows}


@dataclass(frozen=True)
class ClusterNow:
    """A cluster's GPUs now: given to it, bound by KAI to its pods (its queue's allocation)
    and of those the burst beyond its queue's quota, and requested by its pods, waiting ones
    included (its namespace's ResourceQuota), by the latest samples; None until one was
    taken. ``computing``: of ``in_use``, the GPUs' utilisation / 100 summed at that sample
    (None: not sampled, or utilisation unknown then)."""

    name: str
    gpu_class_id: int
    allocated: int
    in_use: float | None
    requested: float | None
    burst: float | None = None
    computing: float | None = None
    # What it holds in its unit (app.kit.gpu_units); its figures are slices on a MIG cluster.
    unit: str = "gpu"
    mig_profile: str = ""
    amount: int = 0

    @property
    def held(self) -> str:
        """What it was given, in its unit: "2", "3 \u00d7 1g.10gb", "0.5 of a GPU"."""
        if self.unit == "gpu":
            return str(self.allocated)
        return steps(GrantUnit(cast_unit(self.unit), self.mig_profile), self.amount)

    @property
    def counted_in(self) -> str:
        """What its in-use figures count, after the number: "" for GPUs, " slices" for MIG."""
        return " slices" if self.unit == "mig" else ""


def _clusters_now_statements() -> tuple[Select[str, int, float, float, float | None],
                                        Select[int, str, int | None, int, str, str, int]]:
    """Built once, the tenant a bound parameter: building the subquery and join on every
    dashboard took about 0.3 ms of CPU, more than running them."""
    tenant_id: BindParameter[int] = bindparam("tenant_id")
    latest = (select(UsageSample.source, UsageSample.subject_id,
                     func.max(UsageSample.taken_s).label("taken_s"))
              .where(UsageSample.tenant_id == tenant_id, UsageSample.source.in_(
                  ("quota", "queue")))
              .group_by(UsageSample.source, UsageSample.subject_id).subquery())
    used = (select(UsageSample.source, UsageSample.subject_id, UsageSample.used_gpus,
                   UsageSample.burst_gpus, UsageSample.utilised_gpus)
            .join(latest, and_(latest.c.source == UsageSample.source,
                               latest.c.subject_id == UsageSample.subject_id,
                               latest.c.taken_s == UsageSample.taken_s))
            .where(UsageSample.tenant_id == tenant_id))
    clusters = (select(VirtualCluster.id, VirtualCluster.name, VirtualCluster.gpu_class_id,
                       VirtualCluster.gpus, VirtualCluster.unit, VirtualCluster.mig_profile,
                       VirtualCluster.amount)
                .where(VirtualCluster.tenant_id == tenant_id,
                       VirtualCluster.gpu_class_id.is_not(None),
                       VirtualCluster.deletion_requested_at.is_(None))
                .order_by(VirtualCluster.name))
    return used, clusters


_USED_NOW, _CLUSTERS_NOW = _clusters_now_statements()


def clusters_now(db: Session, tenant_id: int) -> list[ClusterNow]:
    tenant = {"tenant_id": tenant_id}
    used = {(row.source, row.subject_id): (row.used_gpus, row.burst_gpus, row.utilised_gpus)
            for row in db.execute(_USED_NOW, tenant)}
    return [ClusterNow(c.name, c.gpu_class_id, c.gpus, *_queue_and_quota(used, c.id),
                       unit=c.unit, mig_profile=c.mig_profile, amount=c.amount or 0)
            for c in db.execute(_CLUSTERS_NOW, tenant)]


def _queue_and_quota(used: dict[tuple[str, int], tuple[float, float, float | None]],
                     cluster_id: int
                     ) -> tuple[float | None, float | None, float | None, float | None]:
    """In use, requested, burst and computing, from the cluster's latest queue and quota
    samples."""
    queue, quota = used.get(("queue", cluster_id)), used.get(("quota", cluster_id))
    return (queue[0] if queue else None, quota[0] if quota else None,
            queue[1] if queue else None, queue[2] if queue else None)


def bound_now(db: Session, tenant_id: int | None) -> dict[int, BoundGpus]:
    """GPUs of each class bound to the tenant's pods (every tenant's: None) over all hosts and
    of those the burst, as the worker last read them (app.quotas.models.GpusInUse); a class no
    host reported yet is absent. GPUs: whole ones and shares as fractions; MIG slices, which are
    no GPUs, are left out."""
    query = select(GpusInUse.gpu_class_id, func.sum(GpusInUse.gpus),
                   func.sum(GpusInUse.burst_gpus)).where(GpusInUse.unit != "mig")
    if tenant_id is not None:
        query = query.where(GpusInUse.tenant_id == tenant_id)
    rows = db.execute(query.group_by(GpusInUse.gpu_class_id))
    return {row[0]: BoundGpus(float(row[1]), float(row[2])) for row in rows}


def approved_now(db: Session, tenant_id: int | None) -> dict[int, int]:
    """GPUs of each class approved to the tenant (to every tenant: None), over all regions."""
    query = select(TenantQuota.gpu_class_id, func.sum(TenantQuota.gpus))
    if tenant_id is not None:
        query = query.where(TenantQuota.tenant_id == tenant_id)
    rows = db.execute(query.group_by(TenantQuota.gpu_class_id))
    return {row[0]: int(row[1] or 0) for row in rows}


# (class id, unit, MIG profile) of a tenant's figures now.
UnitKey = tuple[int, str, str]


def approved_in_units(db: Session, tenant_id: int) -> dict[UnitKey, int]:
    """What of each class the tenant was approved, per unit, in the unit's steps (whole GPUs,
    slices of a profile, hundredths of a GPU), over all regions."""
    held = case((TenantQuota.unit == "gpu", TenantQuota.gpus), else_=TenantQuota.amount)
    keys = (TenantQuota.gpu_class_id, TenantQuota.unit, TenantQuota.mig_profile)
    rows = db.execute(select(*keys, func.sum(held)).where(TenantQuota.tenant_id == tenant_id)
                      .group_by(*keys))
    return {(row[0], row[1], row[2]): int(row[3] or 0) for row in rows}


def bound_in_units(db: Session, tenant_id: int) -> dict[UnitKey, BoundGpus]:
    """What is bound to the tenant's pods now per class and unit over all hosts (GPUs, a
    share's as fractions, or slices), and of that the burst; absent until a host reported."""
    keys = (GpusInUse.gpu_class_id, GpusInUse.unit, GpusInUse.mig_profile)
    rows = db.execute(select(*keys, func.sum(GpusInUse.gpus), func.sum(GpusInUse.burst_gpus))
                      .where(GpusInUse.tenant_id == tenant_id).group_by(*keys))
    return {(row[0], row[1], row[2]): BoundGpus(float(row[3]), float(row[4])) for row in rows}


@dataclass(frozen=True)
class NodeSpan:
    """A GPU node's class and GPUs from when the inventory first saw it until it went (None:
    still there); the portal keeps no earlier record of the fleet."""

    gpu_class_id: int
    gpus: int
    first_seen_at: datetime
    gone_at: datetime | None


def node_spans(db: Session, since: datetime) -> list[NodeSpan]:
    """The GPU nodes present at some time since ``since``."""
    rows = db.execute(select(Node.gpu_class_id, Node.gpu_count, Node.first_seen_at, Node.gone_at)
                      .where(Node.gpu_class_id.is_not(None), Node.gpu_count > 0,
                             or_(Node.gone_at.is_(None), Node.gone_at > since)))
    return [NodeSpan(row[0], row[1], row[2], row[3]) for row in rows if row[0] is not None]


def sampled_tenants(db: Session, since_s: int, until_s: int) -> set[int]:
    """Tenants with at least one sample in the span (raw or hourly)."""
    raw = select(UsageSample.tenant_id).where(UsageSample.taken_s >= since_s,
                                              UsageSample.taken_s < until_s)
    hourly = select(HourlyUsage.tenant_id).where(HourlyUsage.hour_s >= since_s - HOUR,
                                                 HourlyUsage.hour_s < until_s)
    return set(db.scalars(union_all(raw, hourly)))


# Per cluster: KAI's allocation to its queue (GPU pods bound), and its namespace quota's use
# (GPU pods bound or waiting: the only figure of a dedicated-nodes cluster of its own).
CLUSTER_SOURCES = ("queue", "quota")


@dataclass(frozen=True)
class ClusterGpuUse:
    """When the cluster's use was last sampled, and last seen with GPUs (None: not since)."""

    sampled_s: int
    busy_s: int | None


def cluster_gpu_use(db: Session, cluster_ids: Sequence[int],
                    since_s: int) -> dict[int, ClusterGpuUse]:
    """Each cluster's use since ``since_s`` from its raw samples and, where raw samples have
    been folded already, its hourly rows (an hour with GPUs in use counts as busy to its end);
    a cluster not sampled since is left out."""
    if not cluster_ids:
        return {}
    raw = select(UsageSample.subject_id.label("cluster_id"),
                 UsageSample.taken_s.label("sampled_s"),
                 case((UsageSample.used_gpus > 0, UsageSample.taken_s)).label("busy_s")).where(
        UsageSample.source.in_(CLUSTER_SOURCES), UsageSample.subject_id.in_(cluster_ids),
        UsageSample.taken_s >= since_s)
    hourly = select(HourlyUsage.subject_id, HourlyUsage.hour_s + HOUR - 1,
                    case((HourlyUsage.peak_used_gpus > 0, HourlyUsage.hour_s + HOUR - 1))).where(
        HourlyUsage.source.in_(CLUSTER_SOURCES), HourlyUsage.subject_id.in_(cluster_ids),
        HourlyUsage.hour_s + HOUR > since_s)
    both = union_all(raw, hourly).subquery("cluster_use")
    rows = db.execute(select(both.c.cluster_id, func.max(both.c.sampled_s),
                             func.max(both.c.busy_s)).group_by(both.c.cluster_id))
    return {int(cluster_id): ClusterGpuUse(int(sampled), int(busy) if busy is not None else None)
            for cluster_id, sampled, busy in rows}
