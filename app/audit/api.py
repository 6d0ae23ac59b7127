"""REST: the audit log."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from starlette.responses import Response

from app.audit import service
from app.audit.schemas import AuditEventOut, AuditFilters
from app.http.deps import CurrentPrincipal, DbSession
from app.http.json_body import page_response
from app.http.pagination import Page, Paging
from app.http.routing import UnitOfWorkRoute

router = APIRouter(prefix="/api/v1/audit", tags=["audit"], route_class=UnitOfWorkRoute)


async def audit_filters(
    tenant: Annotated[str | None, Query(max_length=30)] = None,
    actor: Annotated[str | None, Query(max_length=320, description="actor email")] = None,
    action: Annotated[str | None, Query(max_length=100, description="'quota.' = family")] = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> AuditFilters:
    return AuditFilters(tenant=tenant, actor=actor, action=action, since=since, until=until)


@router.get("", response_model=Page[AuditEventOut])
def list_audit_events(
    principal: CurrentPrincipal, db: DbSession,
    filters: Annotated[AuditFilters, Depends(audit_filters)],
    params: Paging,
) -> Response:
    return page_response(*service.list_event_fields(db, principal, filters, params))
