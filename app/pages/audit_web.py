"""HTML: the audit log, filterable, paged with htmx."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from app.audit.schemas import AuditFilters
from app.auth.deps import CurrentPrincipal
from app.http.deps import DbSession
from app.http.pagination import Paging
from app.http.routing import UnitOfWorkRoute
from app.pages.audit_api import audit_filters, list_events
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)


@router.get("/audit")
def audit_page(
    request: Request, principal: CurrentPrincipal, db: DbSession,
    filters: Annotated[AuditFilters, Depends(audit_filters)],
    params: Paging,
) -> Response:
    events, cursor = list_events(db, principal, filters, params)
    template = "audit/rows.html" if request.headers.get("hx-request") else "audit/page.html"
    return render(request, template, {"events": events, "next_cursor": cursor,
                                      "filters": filters})
