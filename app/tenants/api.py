"""REST: tenants and their members."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.auth.deps import CurrentPrincipal
from app.auth.idempotency import IdempotencyKeyHeader, run_idempotent
from app.authz import ensure_platform_writer
from app.authz.routes import PLATFORM_WRITE
from app.http.deps import DbSession, RowId
from app.http.json_body import page_response
from app.http.pagination import Page, Paging
from app.http.problems import problems
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


@router.get("", response_model=Page[TenantOut], summary="List tenants")
def list_tenants(db: DbSession, principal: CurrentPrincipal, paging: Paging,
                 q: Search = None) -> Response:
    """The tenants you may see: those you belong to, every tenant for platform admins. `q` filters
    by slug or display name."""
    return page_response(*service.list_tenant_fields(db, principal, paging, q))


@router.post("", dependencies=PLATFORM_WRITE, status_code=201, response_model=TenantOut,
             summary="Create a tenant", responses=problems(403, 409))
def create_tenant(request: Request, payload: TenantCreate, db: DbSession,
                  principal: CurrentPrincipal, key: IdempotencyKeyHeader = None) -> Response:
    """Creates a tenant with a slug (DNS-1123 label, at most 30 characters) and a display name
    (platform admins). 409 when the slug is taken. Audited."""
    return run_idempotent(db, principal, key, path=request.url.path, payload=payload,
                          allowed=lambda: ensure_platform_writer(principal),
                          create=lambda: service.create_tenant(db, principal, payload))


@router.get("/{tenant}", response_model=TenantOut, summary="Get a tenant", responses=problems(404))
def get_tenant(tenant: str, db: DbSession, principal: CurrentPrincipal) -> TenantOut:
    """One tenant: slug, display name, state (active or suspended) and your role in it."""
    return service.get_tenant(db, principal, tenant)


@router.patch("/{tenant}", dependencies=PLATFORM_WRITE, response_model=TenantOut,
              summary="Update or suspend a tenant", responses=problems(403, 404))
def update_tenant(tenant: str, payload: TenantUpdate, db: DbSession,
                  principal: CurrentPrincipal) -> TenantOut:
    """Changes a tenant's display name or state (platform admins). A suspended tenant is read-
    only: its members can look but not change anything. Audited."""
    return service.update_tenant(db, principal, tenant, payload)


@router.get("/{tenant}/members", response_model=Page[MemberOut],
            summary="List a tenant's members", responses=problems(403, 404))
def list_members(tenant: str, db: DbSession, principal: CurrentPrincipal,
                 paging: Paging) -> Page[MemberOut]:
    """The tenant's members with their role (admin, member, viewer) and whether the membership is
    direct or from an IdP group (tenant admins and platform admins)."""
    return service.list_members(db, principal, tenant, paging)


@router.post("/{tenant}/members", status_code=201, response_model=MemberOut,
             summary="Add a member", responses=problems(403, 404, 409))
def add_member(request: Request, tenant: str, payload: MemberCreate, db: DbSession,
               principal: CurrentPrincipal, key: IdempotencyKeyHeader = None) -> Response:
    """Gives a user, by email, a role in the tenant (tenant admins); someone who has not signed in
    yet gets it at their first sign-in. 409 when they are a member already. Audited."""
    return run_idempotent(db, principal, key, path=request.url.path, payload=payload,
                          allowed=lambda: tenant_for(db, principal, tenant, "manage"),
                          create=lambda: service.add_member(db, principal, tenant, payload))


@router.patch("/{tenant}/members/{member_id}", response_model=MemberOut,
              summary="Change a member's role", responses=problems(403, 404, 409))
def change_role(tenant: str, member_id: RowId, payload: MemberUpdate, db: DbSession,
                principal: CurrentPrincipal) -> MemberOut:
    """Changes a member's role (tenant admins). 409 when it would leave the tenant without an
    admin. Audited."""
    return service.change_role(db, principal, tenant, member_id, payload)


@router.delete("/{tenant}/members/{member_id}", status_code=204,
               summary="Remove a member", responses=problems(403, 404, 409))
def remove_member(tenant: str, member_id: RowId, db: DbSession,
                  principal: CurrentPrincipal) -> Response:
    """Removes a member from the tenant (tenant admins); their kubeconfigs for its clusters are
    revoked. 409 when it would leave the tenant without an admin. Audited."""
    service.remove_member(db, principal, tenant, member_id)
    return Response(status_code=204)
