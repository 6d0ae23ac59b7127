"""SQL for use samples: which portal rows the host's objects belong to, storing samples, and
folding raw samples into hourly ones (raw kept 2 days, hourly 400 days)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, case, delete, func, insert, select
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from app.nodes.models import Node, NodeAssignment
from app.tenants.models import Tenant
from app.usage.models import HourlyUsage, UsageSample

HOUR = 3600
RAW_RETENTION = timedelta(days=2)
HOURLY_RETENTION = timedelta(days=400)


@dataclass(frozen=True)
class Owner:
    subject_id: int
    tenant_id: int
    gpu_class_id: int | None
    gpus: int = 0  # a dedicated node's GPUs
    # What its figures count (app.kit.gpu_units): a cluster's unit and profile; a node's GPUs.
    unit: str = "gpu"
    mig_profile: str = ""


def clusters_by_name(db: Session, host_id: int) -> dict[tuple[str, str], Owner]:
    """The virtual clusters placed on one host by (tenant slug, cluster name), as that host's
    labels name them: a queue on host A never counts for a cluster placed on host B."""
    rows = db.execute(select(Tenant.slug, VirtualCluster.name, VirtualCluster.id,
                             VirtualCluster.tenant_id, VirtualCluster.gpu_class_id,
                             VirtualCluster.unit, VirtualCluster.mig_profile)
                      .join(Tenant, Tenant.id == VirtualCluster.tenant_id)
                      .where(VirtualCluster.host_cluster_id == host_id))
    return {(r.slug, r.name): Owner(r.id, r.tenant_id, r.gpu_class_id, unit=r.unit,
                                    mig_profile=r.mig_profile) for r in rows}


def ready_clusters(db: Session, host_id: int) -> list[tuple[str, VirtualCluster]]:
    """The host's clusters that have a credential (they were Ready once), with their tenant's
    slug."""
    rows = db.execute(select(Tenant.slug, VirtualCluster)
                      .join(Tenant, Tenant.id == VirtualCluster.tenant_id)
                      .where(VirtualCluster.host_cluster_id == host_id,
                             VirtualCluster.admin_kubeconfig_encrypted.is_not(None),
                             VirtualCluster.deletion_requested_at.is_(None)))
    return [(row[0], row[1]) for row in rows]


def dedicated_nodes_by_host(db: Session) -> dict[int, dict[str, Owner]]:
    """Assigned live nodes, per host then by node name (names are unique per host only)."""
    rows = db.execute(select(Node.host_cluster_id, Node.name, Node.id, NodeAssignment.tenant_id,
                             Node.gpu_class_id, Node.gpu_count)
                      .join(NodeAssignment, NodeAssignment.node_id == Node.id)
                      .where(NodeAssignment.ended_at.is_(None), Node.gone_at.is_(None)))
    found: dict[int, dict[str, Owner]] = {}
    for r in rows:
        found.setdefault(r.host_cluster_id, {})[r.name] = Owner(r.id, r.tenant_id,
                                                                r.gpu_class_id, r.gpu_count)
    return found


def add_samples(db: Session, rows: list[dict[str, object]]) -> None:
    if rows:
        db.execute(insert(UsageSample), rows)


def sample_spans(*, tenant_ids: Any = None, sources: Sequence[str] | None = None) -> Any:
    """Each sample as the span it stands for: from when it was taken until the subject's
    next sample, at most its ``holds_s`` (a stopped worker's last figures do not run on)."""
    series = (UsageSample.source, UsageSample.tenant_id, UsageSample.subject_id)
    following = func.lead(UsageSample.taken_s).over(
        partition_by=series, order_by=(UsageSample.taken_s, UsageSample.id))
    held = UsageSample.taken_s + UsageSample.holds_s
    query = select(UsageSample.taken_s.label("start_s"),
                   case((following < held, following), else_=held).label("end_s"),
                   UsageSample.source, UsageSample.tenant_id, UsageSample.gpu_class_id,
                   UsageSample.unit, UsageSample.mig_profile,
                   UsageSample.subject_id, UsageSample.used_gpus, UsageSample.burst_gpus,
                   UsageSample.utilised_gpus)
    if tenant_ids is not None:
        query = query.where(UsageSample.tenant_id.in_(tenant_ids))
    if sources is not None:
        query = query.where(UsageSample.source.in_(sources))
    return query.subquery("spans")


def known_gpus(spans: Any) -> Any:
    """A span's GPUs in use when its utilisation is known, else none: summed over time, the
    GPU-seconds the utilised GPU-seconds cover."""
    return case((spans.c.utilised_gpus.is_not(None), spans.c.used_gpus), else_=0.0)


def fold_old_samples(db: Session, now_s: int) -> int:
    """Raw samples older than the raw retention become one hourly row per hour and subject:
    mean and peak, and the GPU-seconds of their spans in use, of those burst, utilised, and
    with a utilisation figure (a span is counted in the hour it starts, so an hour's figure may
    reach into the next by up to one sample's hold)."""
    cutoff = (now_s - int(RAW_RETENTION.total_seconds())) // HOUR * HOUR
    hour = UsageSample.taken_s - UsageSample.taken_s % HOUR
    folded = (select(hour.label("hour_s"), UsageSample.source, UsageSample.tenant_id,
                     func.max(UsageSample.gpu_class_id).label("gpu_class_id"),
                     UsageSample.subject_id, UsageSample.unit, UsageSample.mig_profile,
                     func.count().label("samples"),
                     func.avg(UsageSample.used_gpus).label("mean_used"),
                     func.max(UsageSample.used_gpus).label("peak_used"),
                     func.avg(UsageSample.allocated_gpus).label("mean_allocated"),
                     func.avg(UsageSample.requested_gpus).label("mean_requested"))
              .where(UsageSample.taken_s < cutoff)
              .group_by(hour, UsageSample.source, UsageSample.tenant_id, UsageSample.subject_id,
                        UsageSample.unit, UsageSample.mig_profile)
              .subquery("folded"))
    spans = sample_spans()
    span_hour = spans.c.start_s - spans.c.start_s % HOUR
    length = spans.c.end_s - spans.c.start_s
    integrals = (select(span_hour.label("hour_s"), spans.c.source, spans.c.tenant_id,
                        spans.c.subject_id, spans.c.unit, spans.c.mig_profile,
                        func.sum(spans.c.used_gpus * length).label("seconds"),
                        func.sum(spans.c.burst_gpus * length).label("burst_seconds"),
                        func.coalesce(func.sum(spans.c.utilised_gpus * length), 0.0)
                        .label("utilised_seconds"),
                        func.sum(known_gpus(spans) * length).label("known_seconds"))
                 .where(spans.c.start_s < cutoff)
                 .group_by(span_hour, spans.c.source, spans.c.tenant_id, spans.c.subject_id,
                           spans.c.unit, spans.c.mig_profile)
                 .subquery("integrals"))
    rows = (select(folded, integrals.c.seconds, integrals.c.burst_seconds,
                   integrals.c.utilised_seconds, integrals.c.known_seconds)
            .join(integrals, and_(integrals.c.hour_s == folded.c.hour_s,
                                  integrals.c.source == folded.c.source,
                                  integrals.c.tenant_id == folded.c.tenant_id,
                                  integrals.c.subject_id == folded.c.subject_id,
                                  integrals.c.unit == folded.c.unit,
                                  integrals.c.mig_profile == folded.c.mig_profile)))
    columns = ["hour_s", "source", "tenant_id", "gpu_class_id", "subject_id", "unit",
               "mig_profile", "samples",
               "mean_used_gpus", "peak_used_gpus", "mean_allocated_gpus", "mean_requested_gpus",
               "used_gpu_seconds", "burst_gpu_seconds", "utilised_gpu_seconds",
               "utilisation_known_seconds"]
    db.execute(insert(HourlyUsage).from_select(columns, rows))
    result = db.execute(delete(UsageSample).where(UsageSample.taken_s < cutoff))
    return int(getattr(result, "rowcount", 0) or 0)


def expire_hourly(db: Session, now_s: int) -> None:
    cutoff = now_s - int(HOURLY_RETENTION.total_seconds())
    db.execute(delete(HourlyUsage).where(HourlyUsage.hour_s < cutoff))
