"""SQL for the fleet's capacity: each figure summed by the database per host and class."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.nodes.models import Node, NodeAssignment
from app.quotas.models import GpusInUse, TenantQuota
from app.tenants.models import Tenant


@dataclass
class HostClassFigures:
    host: str
    region: str
    state: str
    reachable: bool | None
    gpu_class: str
    display_name: str
    total: int = 0
    dedicated: int = 0
    not_ready: int = 0
    guaranteed: int = 0  # held by the shared-pool clusters placed on the host
    borrowed: float = 0.0  # burst in use: KAI's allocation to the host's queues beyond quota


def host_class_figures(db: Session) -> list[HostClassFigures]:
    """(host, class) figures of every host: nodes in one aggregate, clusters in another,
    burst in use (as the worker last read the host) in a third."""
    hosts = {row.id: row for row in db.scalars(select(HostCluster))}
    classes = {row.id: row for row in db.scalars(select(GpuClass))}
    figures: dict[tuple[int, int], HostClassFigures] = {}

    def entry(host_id: int, class_id: int) -> HostClassFigures:
        key = (host_id, class_id)
        if key not in figures:
            host, gpu_class = hosts[host_id], classes[class_id]
            figures[key] = HostClassFigures(host.name, host.region, host.state,
                                            host.health_reachable, gpu_class.product,
                                            gpu_class.display_name)
        return figures[key]

    dedicated = case((NodeAssignment.id.is_not(None), Node.gpu_count), else_=0)
    not_ready = case((Node.ready.is_(False), Node.gpu_count), else_=0)
    nodes = (select(Node.host_cluster_id, Node.gpu_class_id, func.sum(Node.gpu_count),
                    func.sum(dedicated), func.sum(not_ready))
             .outerjoin(NodeAssignment, (NodeAssignment.node_id == Node.id)
                        & NodeAssignment.ended_at.is_(None))
             .where(Node.gone_at.is_(None), Node.gpu_class_id.is_not(None))
             .group_by(Node.host_cluster_id, Node.gpu_class_id))
    for host_id, class_id, total, on_dedicated, on_not_ready in db.execute(nodes):
        row = entry(host_id, class_id)
        row.total, row.dedicated, row.not_ready = (int(total or 0), int(on_dedicated or 0),
                                                   int(on_not_ready or 0))
    shared = (select(VirtualCluster.host_cluster_id, VirtualCluster.gpu_class_id,
                     func.sum(VirtualCluster.gpus))
              .where(VirtualCluster.gpu_class_id.is_not(None), VirtualCluster.gpus > 0,
                     VirtualCluster.placement == "shared-pool")
              .group_by(VirtualCluster.host_cluster_id, VirtualCluster.gpu_class_id))
    for host_id, class_id, gpus in db.execute(shared):
        if class_id is not None:
            entry(host_id, class_id).guaranteed = int(gpus or 0)
    burst = (select(GpusInUse.host_cluster_id, GpusInUse.gpu_class_id,
                    func.sum(GpusInUse.burst_gpus))
             .group_by(GpusInUse.host_cluster_id, GpusInUse.gpu_class_id))
    for host_id, class_id, borrowed in db.execute(burst):
        entry(host_id, class_id).borrowed = float(borrowed or 0)
    return sorted(figures.values(), key=lambda f: (f.region, f.host, f.gpu_class))


def region_quotas(db: Session) -> dict[tuple[str, str], int]:
    """(region, class product) -> GPUs of the tenants' quotas there."""
    rows = db.execute(select(TenantQuota.region, GpuClass.product, func.sum(TenantQuota.gpus))
                      .join(GpuClass, GpuClass.id == TenantQuota.gpu_class_id)
                      .group_by(TenantQuota.region, GpuClass.product))
    return {(region, product): int(gpus or 0) for region, product, gpus in rows}


def live_cluster_states(db: Session) -> list[Any]:
    """Every cluster not being deleted, with its tenant, host, conditions and power: the
    admin home derives from them which fail or are stuck waking."""
    return list(db.execute(
        select(VirtualCluster.id, Tenant.slug.label("tenant"), VirtualCluster.name,
               HostCluster.name.label("host_cluster"), VirtualCluster.conditions,
               VirtualCluster.power, VirtualCluster.power_changed_at)
        .join(Tenant, Tenant.id == VirtualCluster.tenant_id)
        .join(HostCluster, HostCluster.id == VirtualCluster.host_cluster_id)
        .where(VirtualCluster.deletion_requested_at.is_(None))
        .order_by(Tenant.slug, VirtualCluster.name)))
