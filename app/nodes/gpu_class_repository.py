"""SQL for GPU classes and the capacity figures drawn from the node inventory."""

from __future__ import annotations

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from app.nodes.models import GpuClass, Node, NodeAssignment
from app.quotas.models import TenantQuota


def classes_query() -> Select[GpuClass]:
    return select(GpuClass)


def class_by_product(db: Session, product: str) -> GpuClass | None:
    return db.scalar(select(GpuClass).where(GpuClass.product == product))


def total_gpus(db: Session, gpu_class_id: int) -> int:
    """GPUs on nodes of the class that the inventory has not seen vanish."""
    query = select(func.coalesce(func.sum(Node.gpu_count), 0)).where(
        Node.gpu_class_id == gpu_class_id, Node.gone_at.is_(None)
    )
    return int(db.scalar(query) or 0)


def assigned_gpus(db: Session, gpu_class_id: int, tenant_id: int | None = None) -> int:
    """GPUs on nodes of the class dedicated to a tenant (any tenant unless one is given)."""
    query = (
        select(func.coalesce(func.sum(Node.gpu_count), 0))
        .join(NodeAssignment, NodeAssignment.node_id == Node.id)
        .where(Node.gpu_class_id == gpu_class_id, Node.gone_at.is_(None),
               NodeAssignment.ended_at.is_(None))
    )
    if tenant_id is not None:
        query = query.where(NodeAssignment.tenant_id == tenant_id)
    return int(db.scalar(query) or 0)


def guaranteed_gpus(db: Session, gpu_class_id: int) -> int:
    """The sum of every tenant's approved quota of the class."""
    query = select(func.coalesce(func.sum(TenantQuota.gpus), 0)).where(
        TenantQuota.gpu_class_id == gpu_class_id
    )
    return int(db.scalar(query) or 0)
