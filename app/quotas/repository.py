"""SQL for quota requests and tenant quotas."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CursorResult, Select, func, select, update
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from app.quotas.models import QuotaRequest, TenantQuota


def requests_query(
    *, tenant_id: int | None = None, state: str | None = None
) -> Select[QuotaRequest]:
    query = select(QuotaRequest)
    if tenant_id is not None:
        query = query.where(QuotaRequest.tenant_id == tenant_id)
    if state is not None:
        query = query.where(QuotaRequest.state == state)
    return query


def request_for_update(db: Session, request_id: int) -> QuotaRequest | None:
    query = select(QuotaRequest).where(QuotaRequest.id == request_id).with_for_update()
    return db.scalar(query.execution_options(populate_existing=True))


def claim_request(db: Session, request_id: int, from_state: str, **values: Any) -> bool:
    """Moves a request out of ``from_state`` only if it is still there: one decision wins."""
    result = db.execute(
        update(QuotaRequest)
        .where(QuotaRequest.id == request_id, QuotaRequest.state == from_state)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    claimed = isinstance(result, CursorResult) and result.rowcount == 1
    if claimed:
        request = db.get(QuotaRequest, request_id)
        if request is not None:
            db.refresh(request)
    return claimed


def due_expiries(db: Session, now: datetime) -> list[int]:
    query = select(QuotaRequest.id).where(
        QuotaRequest.state == "approved", QuotaRequest.ends_at.is_not(None),
        QuotaRequest.ends_at <= now,
    ).order_by(QuotaRequest.id)
    return list(db.scalars(query))


def tenant_quotas_query(tenant_id: int) -> Select[TenantQuota]:
    return select(TenantQuota).where(TenantQuota.tenant_id == tenant_id)


def tenant_quota_for_update(db: Session, tenant_id: int, gpu_class_id: int) -> TenantQuota | None:
    query = select(TenantQuota).where(
        TenantQuota.tenant_id == tenant_id, TenantQuota.gpu_class_id == gpu_class_id
    ).with_for_update()
    return db.scalar(query.execution_options(populate_existing=True))


def allocated_gpus(db: Session, tenant_id: int, gpu_class_id: int) -> int:
    query = select(func.coalesce(func.sum(VirtualCluster.gpus), 0)).where(
        VirtualCluster.tenant_id == tenant_id, VirtualCluster.gpu_class_id == gpu_class_id
    )
    return int(db.scalar(query) or 0)


def clusters_with_gpus(db: Session, tenant_id: int, gpu_class_id: int) -> list[VirtualCluster]:
    query = select(VirtualCluster).where(
        VirtualCluster.tenant_id == tenant_id, VirtualCluster.gpu_class_id == gpu_class_id,
        VirtualCluster.gpus > 0,
    ).order_by(VirtualCluster.id)
    return list(db.scalars(query))
