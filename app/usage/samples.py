"""SQL for use samples: which portal rows the host's objects belong to, storing samples, and
folding raw samples into hourly ones (raw kept 2 days, hourly 400 days)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, func, insert, select
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


def clusters_by_name(db: Session, host_id: int) -> dict[tuple[str, str], Owner]:
    """The virtual clusters placed on one host by (tenant slug, cluster name), as that host's
    labels name them: a queue on host A never counts for a cluster placed on host B."""
    rows = db.execute(select(Tenant.slug, VirtualCluster.name, VirtualCluster.id,
                             VirtualCluster.tenant_id, VirtualCluster.gpu_class_id)
                      .join(Tenant, Tenant.id == VirtualCluster.tenant_id)
                      .where(VirtualCluster.host_cluster_id == host_id))
    return {(r.slug, r.name): Owner(r.id, r.tenant_id, r.gpu_class_id) for r in rows}


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


def fold_old_samples(db: Session, now_s: int) -> int:
    """Raw samples older than the raw retention become one hourly row per hour and subject."""
    cutoff = (now_s - int(RAW_RETENTION.total_seconds())) // HOUR * HOUR
    hour = UsageSample.taken_s - UsageSample.taken_s % HOUR
    folded = (select(hour, UsageSample.source, UsageSample.tenant_id,
                     func.max(UsageSample.gpu_class_id), UsageSample.subject_id,
                     func.count(), func.avg(UsageSample.used_gpus),
                     func.max(UsageSample.used_gpus), func.avg(UsageSample.allocated_gpus),
                     func.avg(UsageSample.requested_gpus))
              .where(UsageSample.taken_s < cutoff)
              .group_by(hour, UsageSample.source, UsageSample.tenant_id, UsageSample.subject_id))
    columns = ["hour_s", "source", "tenant_id", "gpu_class_id", "subject_id", "samples",
               "mean_used_gpus", "peak_used_gpus", "mean_allocated_gpus", "mean_requested_gpus"]
    db.execute(insert(HourlyUsage).from_select(columns, folded))
    result = db.execute(delete(UsageSample).where(UsageSample.taken_s < cutoff))
    return int(getattr(result, "rowcount", 0) or 0)


def expire_hourly(db: Session, now_s: int) -> None:
    cutoff = now_s - int(HOURLY_RETENTION.total_seconds())
    db.execute(delete(HourlyUsage).where(HourlyUsage.hour_s < cutoff))
