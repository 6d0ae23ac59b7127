"""HTML: a tenant's usage page, the platform admins' usage page, and /usage that picks one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import RedirectResponse, Response

from app.auth.deps import CurrentPrincipal
from app.http.deps import DbSession
from app.http.routing import UnitOfWorkRoute
from app.kit.validation import FilterMoment
from app.usage import pages
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)
From = Annotated[FilterMoment | None, Query(alias="from")]
To = Annotated[FilterMoment | None, Query(alias="to")]


@router.get("/usage")
def usage_home(principal: CurrentPrincipal, db: DbSession) -> Response:
    """Platform admins to the fleet's usage; others to their first tenant's."""
    if principal.is_platform_admin:
        return RedirectResponse("/admin/usage", status_code=303)
    slugs = pages.visible_slugs(db, principal)
    if not slugs:
        return RedirectResponse("/", status_code=303)
    return RedirectResponse(f"/t/{slugs[0]}/usage", status_code=303)


@router.get("/t/{tenant}/usage")
def tenant_usage(request: Request, tenant: str, principal: CurrentPrincipal, db: DbSession,
                 start: From = None, end: To = None) -> Response:
    context = pages.tenant_page(db, principal, tenant, pages.span(start, end))
    return render(request, "usage/tenant.html", context)


@router.get("/admin/usage")
def admin_usage(request: Request, principal: CurrentPrincipal, db: DbSession,
                start: From = None, end: To = None) -> Response:
    context = pages.admin_page(db, principal, pages.span(start, end))
    return render(request, "usage/admin.html", context)
