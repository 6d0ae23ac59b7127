"""REST: tenants and their members."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import JSONResponse, Response

from app.auth.deps import CurrentPrincipal
from app.auth.idempotency import IdempotencyKeyHeader, run_idempotent
from app.authz import ensure_platform_writer
from app.http.deps import DbSession, RowId
from app.http.json_body import page_response
from app.http.pagination import Page, Paging
from app.http.routing import UnitOfWorkRoute
from app.tenants import service
from app.tenants.access import tenant_for
from app.tenants.schemas import (
    MemberCreate,
    MemberOut,
    MemberUpdate,
    TenantCreate,
    TenantOut,
    TenantUpdate,
)

router = APIRouter(prefix="/api/v1/tenants", tags=["tenants"], route_class=UnitOfWorkRoute)
Search = Annotated[str | None, Query(max_length=100,
                                     description="slug or display name contains (any case)")]


@router.get("", response_model=Page[TenantOut])
def list_tenants(db: DbSession, principal: CurrentPrincipal, paging: Paging,
                 q: Search = None) -> Response:
    return page_response(*service.list_tenant_fields(db, principal, paging, q))


@router.post("", status_code=201, response_model=TenantOut)
def create_tenant(request: Request, payload: TenantCreate, db: DbSession,
                  principal: CurrentPrincipal, key: IdempotencyKeyHeader = None) -> JSONResponse:
    return run_idempotent(db, principal, key, path=request.url.path, payload=payload,
                          allowed=lambda: ensure_platform_writer(principal),
                          create=lambda: service.create_tenant(db, principal, payload))


@router.get("/{tenant}", response_model=TenantOut)
def get_tenant(tenant: str, db: DbSession, principal: CurrentPrincipal) -> TenantOut:
    return service.get_tenant(db, principal, tenant)


@router.patch("/{tenant}", response_model=TenantOut)
def update_tenant(tenant: str, payload: TenantUpdate, db: DbSession,
                  principal: CurrentPrincipal) -> TenantOut:
    return service.update_tenant(db, principal, tenant, payload)


@router.get("/{tenant}/members", response_model=Page[MemberOut])
def list_members(tenant: str, db: DbSession, principal: CurrentPrincipal,
                 paging: Paging) -> Page[MemberOut]:
    return service.list_members(db, principal, tenant, paging)


@router.post("/{tenant}/members", status_code=201, response_model=MemberOut)
def add_member(request: Request, tenant: str, payload: MemberCreate, db: DbSession,
               principal: CurrentPrincipal, key: IdempotencyKeyHeader = None) -> JSONResponse:
    return run_idempotent(db, principal, key, path=request.url.path, payload=payload,
                          allowed=lambda: tenant_for(db, principal, tenant, "manage"),
                          create=lambda: service.add_member(db, principal, tenant, payload))


@router.patch("/{tenant}/members/{member_id}", response_model=MemberOut)
def change_role(tenant: str, member_id: RowId, payload: MemberUpdate, db: DbSession,
                principal: CurrentPrincipal) -> MemberOut:
    return service.change_role(db, principal, tenant, member_id, payload)


@router.delete("/{tenant}/members/{member_id}", status_code=204)
def remove_member(tenant: str, member_id: RowId, db: DbSession,
                  principal: CurrentPrincipal) -> Response:
    service.remove_member(db, principal, tenant, member_id)
    return Response(status_code=204)
