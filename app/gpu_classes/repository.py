"""SQL for GPU classes and the capacity figures drawn from the node inventory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, Integer, Select, and_, case, cast, func, select, true
from sqlalchemy.orm import Session

from app.gpu_classes.models import GpuClass
from app.gpu_classes.read_models import node_assignments, nodes, tenant_quotas
from app.hosts.models import HostCluster
from app.hosts.repository import hosts_in


def classes_query() -> Select[GpuClass]:
    return select(GpuClass)


def class_by_product(db: Session, product: str) -> GpuClass | None:
    return db.scalar(select(GpuClass).where(GpuClass.product == product))


def total_gpus(db: Session, gpu_class_id: int) -> int:
    """GPUs on nodes of the class that the inventory has not seen vanish."""
    query = select(func.coalesce(func.sum(nodes.c.gpu_count), 0)).where(
        nodes.c.gpu_class_id == gpu_class_id, nodes.c.gone_at.is_(None)
    )
    return int(db.scalar(query) or 0)


def assigned_gpus(db: Session, gpu_class_id: int, tenant_id: int | None = None,
                  region: str | None = None) -> int:
    """GPUs on nodes of the class dedicated to a tenant (any tenant unless one is given), on
    the hosts of a region (any unless one is given)."""
    query = (
        select(func.coalesce(func.sum(nodes.c.gpu_count), 0))
        .join(node_assignments, node_assignments.c.node_id == nodes.c.id)
        .where(nodes.c.gpu_class_id == gpu_class_id, nodes.c.gone_at.is_(None),
               node_assignments.c.ended_at.is_(None), _in_region(region))
    )
    if tenant_id is not None:
        query = query.where(node_assignments.c.tenant_id == tenant_id)
    return int(db.scalar(query) or 0)


def guaranteed_gpus(db: Session, gpu_class_id: int) -> int:
    """The sum of every tenant's approved quota of the class."""
    query = select(func.coalesce(func.sum(tenant_quotas.c.gpus), 0)).where(
        tenant_quotas.c.gpu_class_id == gpu_class_id
    )
    return int(db.scalar(query) or 0)


@dataclass
class CapacityFigures:
    """A class's capacity inputs, each summed by the database."""

    total: int = 0
    not_ready: int = 0
    assigned: int = 0
    guaranteed: int = 0
    shared_guaranteed: int = 0
    mig_resources: dict[str, int] = field(default_factory=dict)


def capacity_figures(db: Session, class_ids: Sequence[int],
                     region: str | None = None) -> dict[int, CapacityFigures]:
    """Capacity inputs of many classes in three aggregate queries, whatever the fleet's size:
    over the whole fleet, or in one region (the nodes of its hosts, the quotas for it)."""
    figures = {class_id: CapacityFigures() for class_id in class_ids}
    if not figures:
        return figures
    ids = list(figures)
    for class_id, total, not_ready, assigned in db.execute(_node_totals(ids, region)):
        row = figures[class_id]
        row.total, row.not_ready, row.assigned = int(total), int(not_ready), int(assigned)
    for class_id, guaranteed, shared in db.execute(_quota_totals(ids, region)):
        figures[class_id].guaranteed, figures[class_id].shared_guaranteed = (
            int(guaranteed), int(shared))
    for class_id, name, count in db.execute(_mig_totals(db, ids, region)):
        figures[class_id].mig_resources[str(name)] = int(count)
    return figures


def _in_region(region: str | None) -> ColumnElement[bool]:
    if region is None:
        return true()
    return nodes.c.host_cluster_id.in_(hosts_in(region))


def _active_assignment() -> ColumnElement[bool]:
    return and_(node_assignments.c.node_id == nodes.c.id, node_assignments.c.ended_at.is_(None))


def _node_totals(class_ids: list[int],
                 region: str | None) -> Select[int | None, int, Any, Any]:
    """Whole GPUs on live nodes per class: all, on nodes not ready, on dedicated nodes."""
    not_ready = case((nodes.c.ready.is_(False), nodes.c.gpu_count), else_=0)
    dedicated = case((node_assignments.c.id.is_not(None), nodes.c.gpu_count), else_=0)
    return (select(nodes.c.gpu_class_id, func.sum(nodes.c.gpu_count), func.sum(not_ready),
                   func.sum(dedicated))
            .outerjoin(node_assignments, _active_assignment())
            .where(nodes.c.gpu_class_id.in_(class_ids), nodes.c.gone_at.is_(None),
                   _in_region(region))
            .group_by(nodes.c.gpu_class_id))


def _quota_totals(class_ids: list[int], region: str | None) -> Select[int, int, Any]:
    """Per class: the tenants' quota, and the part of it their dedicated nodes do not cover
    (nodes cover the quota of their own host's region)."""
    dedicated = (select(node_assignments.c.tenant_id, nodes.c.gpu_class_id,
                        HostCluster.region.label("region"),
                        func.sum(nodes.c.gpu_count).label("gpus"))
                 .join(nodes, _active_assignment())
                 .join(HostCluster, HostCluster.id == nodes.c.host_cluster_id)
                 .where(nodes.c.gpu_class_id.in_(class_ids), nodes.c.gone_at.is_(None),
                        _in_region(region))
                 .group_by(node_assignments.c.tenant_id, nodes.c.gpu_class_id,
                           HostCluster.region)
                 .subquery())
    in_region = true() if region is None else tenant_quotas.c.region == region
    on_nodes = func.coalesce(dedicated.c.gpus, 0)
    uncovered = case((tenant_quotas.c.gpus > on_nodes, tenant_quotas.c.gpus - on_nodes), else_=0)
    quotas = tenant_quotas.c
    return (select(quotas.gpu_class_id, func.sum(quotas.gpus), func.sum(uncovered))
            .outerjoin(dedicated, and_(dedicated.c.tenant_id == tenant_quotas.c.tenant_id,
                                       dedicated.c.gpu_class_id == tenant_quotas.c.gpu_class_id,
                                       dedicated.c.region == tenant_quotas.c.region))
            .where(tenant_quotas.c.gpu_class_id.in_(class_ids), in_region)
            .group_by(tenant_quotas.c.gpu_class_id))


def _mig_totals(db: Session, class_ids: list[int], region: str | None) -> Select[Any]:
    """MIG slices per class and profile, summed from the nodes' JSON in the database.

    Only nodes in a MIG mode carry slices, so the partial index on them keeps this small.
    """
    each = "json_each_text" if db.get_bind().dialect.name == "postgresql" else "json_each"
    slices = getattr(func, each)(nodes.c.mig_resources).table_valued("key", "value")
    return (select(nodes.c.gpu_class_id, slices.c.key, func.sum(cast(slices.c.value, Integer)))
            .select_from(nodes).join(slices, true())
            .where(nodes.c.gpu_class_id.in_(class_ids), nodes.c.gone_at.is_(None),
                   nodes.c.mig_strategy != "none", _in_region(region))
            .group_by(nodes.c.gpu_class_id, slices.c.key)
            .order_by(nodes.c.gpu_class_id, slices.c.key))
