"""REST: a tenant's quota and requests, and the platform admins' decisions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from app.auth.deps import CurrentPrincipal
from app.auth.idempotency import IdempotencyKeyHeader, run_idempotent
from app.authz.routes import PLATFORM_WRITE
from app.http.deps import DbSession, RowId, get_settings_dep
from app.http.json_body import page_response
from app.http.pagination import Page, Paging
from app.http.problems import problems
from app.http.routing import UnitOfWorkRoute
from app.kit.config import Settings
from app.quotas import burst, figures, service
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
AppSettings = Annotated[Settings, Depends(get_settings_dep)]
StateFilter = Annotated[RequestState | None, Query(description="only requests in this state")]


@router.get("/tenants/{tenant}/quota", response_model=Page[TenantQuotaOut],
            summary="Get a tenant's GPU quota", responses=problems(404))
def tenant_quota(tenant: str, db: DbSession, principal: CurrentPrincipal,
                 paging: Paging) -> Response:
    """Per GPU class: the GPUs approved for the tenant, how many its clusters and dedicated nodes
    hold, how many are in use and how many are borrowed beyond the guarantee (burst)."""
    return page_response(*figures.tenant_quota_fields(db, principal, tenant, paging))


@router.get("/tenants/{tenant}/quota-requests", response_model=Page[QuotaRequestOut],
            summary="List a tenant's quota requests", responses=problems(404))
def tenant_requests(tenant: str, db: DbSession, principal: CurrentPrincipal, paging: Paging,
                    state: StateFilter = None) -> Page[QuotaRequestOut]:
    """The tenant's quota requests, newest first, optionally in one state (pending, approved,
    rejected, cancelled, expired), with the decision and its note. Any member may look."""
    return service.tenant_requests(db, principal, tenant, paging, state)


@router.post("/tenants/{tenant}/quota-requests", status_code=201,
             response_model=QuotaRequestOut,
             summary="Request GPU quota", responses=problems(403, 404, 409))
def create_request(request: Request, tenant: str, payload: QuotaRequestCreate, db: DbSession,
                   principal: CurrentPrincipal, settings: AppSettings,
                   key: IdempotencyKeyHeader = None) -> Response:
    """Asks the platform admins for GPUs of a class, with a reason and optionally an end date
    (tenant admins). Lands in the approval queue as pending. 409 when the tenant already has
    `PORTAL_TENANT_MAX_PENDING_QUOTA_REQUESTS` pending (the answer names the limit and the
    count). Audited."""
    return run_idempotent(db, principal, key, path=request.url.path, payload=payload,
                          allowed=lambda: tenant_for(db, principal, tenant, "manage"),
                          create=lambda: service.create_request(db, principal, settings, tenant,
                                                                payload))


@router.post("/tenants/{tenant}/quota-requests/{request_id}/cancel",
             response_model=QuotaRequestOut,
             summary="Cancel a quota request", responses=problems(403, 404, 409))
def cancel_request(tenant: str, request_id: RowId, db: DbSession,
                   principal: CurrentPrincipal) -> QuotaRequestOut:
    """Withdraws a pending request (tenant admins). 409 when it was decided already. Audited."""
    return service.cancel_request(db, principal, tenant, request_id)


@router.get("/quota-requests", response_model=Page[QueueItem],
            summary="List the quota approval queue", responses=problems(403))
def queue(db: DbSession, principal: CurrentPrincipal, paging: Paging,
          state: StateFilter = None) -> Page[QueueItem]:
    """Every tenant's quota requests, oldest first (the one waiting longest is decided first),
    optionally in one state, with each class's capacity beside them (platform admins)."""
    return service.queue(db, principal, paging, state)


@router.post("/quota-requests/{request_id}/approve", response_model=QueueItem,
             dependencies=PLATFORM_WRITE,
             summary="Approve a quota request", responses=problems(403, 404, 409))
def approve(request_id: RowId, payload: ApproveIn, db: DbSession,
            principal: CurrentPrincipal) -> QueueItem:
    """Approves a pending request, maybe for fewer GPUs, with a note (platform admins). The
    tenant's quota and its KAI queue follow within seconds. 409 when it was decided
    already, or when it would promise more GPUs than the class has and `overcommit` is not
    set. Audited."""
    return service.approve(db, principal, request_id, payload)


@router.post("/quota-requests/{request_id}/reject", response_model=QueueItem,
             dependencies=PLATFORM_WRITE,
             summary="Reject a quota request", responses=problems(403, 404, 409))
def reject(request_id: RowId, payload: RejectIn, db: DbSession,
           principal: CurrentPrincipal) -> QueueItem:
    """Rejects a pending request with a note the tenant sees (platform admins). 409 when it was
    decided already. Audited."""
    return service.reject(db, principal, request_id, payload)


@router.get("/tenants/{tenant}/burst-policy", response_model=BurstOut,
            summary="Get a tenant's burst policy", responses=problems(404))
def burst_policy(tenant: str, db: DbSession, principal: CurrentPrincipal) -> BurstOut:
    """How the tenant may borrow idle GPUs beyond its guarantee, and how soon they are reclaimed."""
    return BurstOut(**burst.burst_for(db, principal, tenant).as_dict())


@router.put("/tenants/{tenant}/burst-policy", dependencies=PLATFORM_WRITE, response_model=BurstOut,
            summary="Set a tenant's burst policy", responses=problems(403, 404))
def set_burst_policy(tenant: str, payload: BurstIn, db: DbSession,
                     principal: CurrentPrincipal) -> BurstOut:
    """Sets the tenant's burst tier, and any of its values apart from it (platform admins). The
    tenant's KAI queues and cluster quotas follow within seconds. Audited."""
    chosen = burst.set_burst(db, principal, tenant, payload.tier, payload.own_values())
    return BurstOut(**chosen.as_dict())
