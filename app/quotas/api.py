"""REST: a tenant's quota and requests, and the platform admins' decisions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import JSONResponse

from app.auth.deps import CurrentPrincipal
from app.auth.idempotency import IdempotencyKeyHeader, run_idempotent
from app.http.deps import DbSession, RowId
from app.http.pagination import Page, Paging
from app.http.routing import UnitOfWorkRoute
from app.quotas import burst, service
from app.quotas.schemas import (
    ApproveIn,
    BurstIn,
    BurstOut,
    QueueItem,
    QuotaRequestCreate,
    QuotaRequestOut,
    RejectIn,
    RequestState,
    TenantQuotaOut,
)
from app.tenants.access import tenant_for

router = APIRouter(prefix="/api/v1", tags=["quota"], route_class=UnitOfWorkRoute)
StateFilter = Annotated[RequestState | None, Query(description="only requests in this state")]


@router.get("/tenants/{tenant}/quota", response_model=Page[TenantQuotaOut])
def tenant_quota(tenant: str, db: DbSession, principal: CurrentPrincipal,
                 paging: Paging) -> Page[TenantQuotaOut]:
    return service.tenant_quota(db, principal, tenant, paging)


@router.get("/tenants/{tenant}/quota-requests", response_model=Page[QuotaRequestOut])
def tenant_requests(tenant: str, db: DbSession, principal: CurrentPrincipal, paging: Paging,
                    state: StateFilter = None) -> Page[QuotaRequestOut]:
    return service.tenant_requests(db, principal, tenant, paging, state)


@router.post("/tenants/{tenant}/quota-requests", status_code=201,
             response_model=QuotaRequestOut)
def create_request(request: Request, tenant: str, payload: QuotaRequestCreate, db: DbSession,
                   principal: CurrentPrincipal, key: IdempotencyKeyHeader = None) -> JSONResponse:
    return run_idempotent(db, principal, key, path=request.url.path, payload=payload,
                          allowed=lambda: tenant_for(db, principal, tenant, "manage"),
                          create=lambda: service.create_request(db, principal, tenant, payload))


@router.post("/tenants/{tenant}/quota-requests/{request_id}/cancel",
             response_model=QuotaRequestOut)
def cancel_request(tenant: str, request_id: RowId, db: DbSession,
                   principal: CurrentPrincipal) -> QuotaRequestOut:
    return service.cancel_request(db, principal, tenant, request_id)


@router.get("/quota-requests", response_model=Page[QueueItem])
def queue(db: DbSession, principal: CurrentPrincipal, paging: Paging,
          state: StateFilter = None) -> Page[QueueItem]:
    return service.queue(db, principal, paging, state)


@router.post("/quota-requests/{request_id}/approve", response_model=QueueItem)
def approve(request_id: RowId, payload: ApproveIn, db: DbSession,
            principal: CurrentPrincipal) -> QueueItem:
    return service.approve(db, principal, request_id, payload)


@router.post("/quota-requests/{request_id}/reject", response_model=QueueItem)
def reject(request_id: RowId, payload: RejectIn, db: DbSession,
           principal: CurrentPrincipal) -> QueueItem:
    return service.reject(db, principal, request_id, payload)


@router.get("/tenants/{tenant}/burst-policy", response_model=BurstOut)
def burst_policy(tenant: str, db: DbSession, principal: CurrentPrincipal) -> BurstOut:
    """How the tenant may borrow idle GPUs beyond its guarantee, and how soon they are
    reclaimed."""
    return BurstOut(**burst.burst_for(db, principal, tenant).as_dict())


@router.put("/tenants/{tenant}/burst-policy", response_model=BurstOut)
def set_burst_policy(tenant: str, payload: BurstIn, db: DbSession,
                     principal: CurrentPrincipal) -> BurstOut:
    """Set the tenant's burst tier, and any of its values apart from it (platform admins).
    The tenant's KAI queues and cluster quotas follow within seconds."""
    chosen = burst.set_burst(db, principal, tenant, payload.tier, payload.own_values())
    return BurstOut(**chosen.as_dict())
