"""HTML: the tenant dashboard, members management and the platform admins' tenants page."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.auth.csrf import STATE_CHANGING
from app.auth.deps import CurrentPrincipal
from app.auth.principal import Principal
from app.authz import ensure_platform_admin
from app.authz.routes import PLATFORM_STATE_CHANGING
from app.http.deps import DbSession, RowId
from app.http.pagination import PageParams, Paging
from app.http.routing import UnitOfWorkRoute
from app.kit.errors import NotFound
from app.tenants import service
from app.tenants.api import Search
from app.tenants.schemas import MemberCreate, MemberUpdate, TenantCreate, TenantUpdate
from app.web.forms import (
    FieldErrors,
    FormFields,
    Refusal,
    form_payload,
    go_to,
    in_row,
    is_htmx,
    submitted,
    with_toast,
)
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)
EVERYTHING = PageParams(limit=200)
FIRST_PAGE = PageParams()


def _members_page(request: Request, db: DbSession, principal: Principal, tenant: str,
                  form: dict[str, Any] | None = None, errors: FieldErrors | None = None,
                  status_code: int = 200) -> Response:
    row, can_manage = service.tenant_and_rights(db, principal, tenant)
    members = service.list_members(db, principal, tenant, EVERYTHING).items
    return render(request, "tenants/members.html", {
        "tenant": row, "can_manage": can_manage, "members": members,
        "form": form or {"role": "member"}, "errors": errors or {},
    }, status_code=status_code)


@router.get("/t/{tenant}/members")
def members(request: Request, tenant: str, db: DbSession,
            principal: CurrentPrincipal) -> Response:
    return _members_page(request, db, principal, tenant)


@router.post("/t/{tenant}/members", dependencies=STATE_CHANGING)
def add_member(request: Request, tenant: str, db: DbSession, principal: CurrentPrincipal,
               fields: FormFields) -> Response:
    payload = form_payload(fields, keys=("email", "role"))

    def add() -> Response:
        service.add_member(db, principal, tenant, MemberCreate.model_validate(payload))
        return go_to(request, f"/t/{tenant}/members",
                     toast=f"{payload.get('email', '')} added as {payload.get('role', '')}.")

    return submitted(add, lambda refusal: _members_page(
        request, db, principal, tenant, payload, refusal.errors, refusal.status))


def _member_row(request: Request, tenant: str, member: Any, error: str = "",
                status_code: int = 200) -> Response:
    return render(request, "tenants/_member_row.html",
                  {"tenant_slug": tenant, "member": member, "can_manage": True,
                   "error": error}, status_code=status_code)


@router.post("/t/{tenant}/members/{member_id}", dependencies=STATE_CHANGING)
def change_role(request: Request, tenant: str, member_id: RowId, db: DbSession,
                principal: CurrentPrincipal, fields: FormFields) -> Response:
    def change() -> Response:
        payload = MemberUpdate.model_validate(form_payload(fields, keys=("role",)))
        member = service.change_role(db, principal, tenant, member_id, payload)
        if not is_htmx(request):
            return go_to(request, f"/t/{tenant}/members")
        return with_toast(_member_row(request, tenant, member),
                          f"Role changed to {member.role}.")

    return submitted(change, _in_member_row(request, db, principal, tenant, member_id))


@router.post("/t/{tenant}/members/{member_id}/remove", dependencies=STATE_CHANGING)
def remove_member(request: Request, tenant: str, member_id: RowId, db: DbSession,
                  principal: CurrentPrincipal) -> Response:
    def remove() -> Response:
        service.remove_member(db, principal, tenant, member_id)
        if not is_htmx(request):
            return go_to(request, f"/t/{tenant}/members")
        return with_toast(Response(status_code=200), "Member removed.")

    return submitted(remove, _in_member_row(request, db, principal, tenant, member_id))


def _in_member_row(request: Request, db: DbSession, principal: Principal, tenant: str,
                   member_id: RowId) -> Callable[[Refusal], Response]:
    return in_row(request, lambda refusal: _member_row(
        request, tenant, _find_member(db, principal, tenant, member_id), refusal.detail,
        refusal.status))


def _find_member(db: DbSession, principal: Principal, tenant: str, member_id: RowId) -> Any:
    members = service.list_members(db, principal, tenant, EVERYTHING).items
    found = next((m for m in members if m.id == member_id), None)
    if found is None:
        raise NotFound(f"no member {member_id} in {tenant!r}")
    return found


# ----- platform admins


def _tenants_page(request: Request, db: DbSession, principal: Principal,
                  form: dict[str, Any] | None = None, errors: FieldErrors | None = None,
                  status_code: int = 200, paging: PageParams = FIRST_PAGE,
                  search: str | None = None) -> Response:
    ensure_platform_admin(principal)
    page = service.list_tenants(db, principal, paging, search)
    return render(request, "admin/tenants.html", {
        "tenants": page.items, "next_cursor": page.next_cursor, "search": search or "",
        "form": form or {}, "errors": errors or {},
    }, status_code=status_code)


@router.get("/admin/tenants")
def admin_tenants(request: Request, db: DbSession, principal: CurrentPrincipal, paging: Paging,
                  q: Search = None) -> Response:
    return _tenants_page(request, db, principal, paging=paging, search=q)


@router.post("/admin/tenants", dependencies=PLATFORM_STATE_CHANGING)
def create_tenant(request: Request, db: DbSession, principal: CurrentPrincipal,
                  fields: FormFields) -> Response:
    payload = form_payload(fields, keys=("slug", "display_name", "admin_email"))
    if not payload.get("admin_email"):
        payload.pop("admin_email", None)

    def create() -> Response:
        service.create_tenant(db, principal, TenantCreate.model_validate(payload))
        return go_to(request, "/admin/tenants",
                     toast=f"Tenant {payload.get('slug', '')} created.")

    return submitted(create, lambda refusal: _tenants_page(
        request, db, principal, payload, refusal.errors, refusal.status))


@router.post("/admin/tenants/{tenant}", dependencies=PLATFORM_STATE_CHANGING)
def update_tenant(request: Request, tenant: str, db: DbSession, principal: CurrentPrincipal,
                  fields: FormFields) -> Response:
    payload = {k: v for k, v in form_payload(fields, keys=("display_name", "state")).items()
               if v != ""}

    def update() -> Response:
        row = service.update_tenant(db, principal, tenant, TenantUpdate.model_validate(payload))
        if not is_htmx(request):
            return go_to(request, "/admin/tenants")
        return render(request, "admin/_tenant_row.html", {"tenant": row, "error": ""})

    return submitted(update, in_row(request, lambda refusal: render(
        request, "admin/_tenant_row.html",
        {"tenant": service.get_tenant(db, principal, tenant), "error": refusal.detail},
        status_code=refusal.status)))
