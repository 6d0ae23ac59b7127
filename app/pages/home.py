"""The landing page and the signed-in dashboard; a platform admin's opens on what needs them
now (app.fleet.attention)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.auth.deps import MaybePrincipal
from app.fleet.attention import attention
from app.http.deps import DbSession
from app.http.routing import UnitOfWorkRoute
from app.tenants.access import tenants_visible_to
from app.tenants.models import Tenant
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)


@router.get("/")
def home(request: Request, db: DbSession, principal: MaybePrincipal) -> Response:
    tenants: list[tuple[Tenant, str]] = []
    if principal is not None:
        rows = db.scalars(tenants_visible_to(principal).order_by(Tenant.slug))
        tenants = [
            (t, principal.roles.get(t.id, "platform admin")) for t in rows
        ]
    needs = attention(db, principal) if principal and principal.is_platform_admin else None
    return render(request, "home.html", {"tenants": tenants, "attention": needs})
