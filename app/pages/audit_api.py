"""REST: the audit log, as the caller may see it (the tenants it manages; all for platform
admins)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from sqlalchemy.orm import Session
from starlette.responses import Response

from app.audit import service
from app.audit.schemas import AuditEventOut, AuditFilters
from app.auth.deps import CurrentPrincipal
from app.auth.principal import Principal
from app.authz import tenant_ids_managed_by
from app.http.deps import DbSession
from app.http.json_body import page_response
from app.http.pagination import Page, PageParams, Paging
from app.http.problems import problems
from app.http.routing import UnitOfWorkRoute
from app.kit.errors import Forbidden
from app.kit.validation import FilterMoment
from app.tenants.access import tenant_for

router = APIRouter(prefix="/api/v1/audit", tags=["audit"], route_class=UnitOfWorkRoute)


async def audit_filters(
    tenant: Annotated[str | None, Query(max_length=30)] = None,
    actor: Annotated[str | None, Query(max_length=320, description="actor email")] = None,
    action: Annotated[str | None, Query(max_length=100, description="'quota.' = family")] = None,
    since: Annotated[FilterMoment | None, Query(description=(
        "events at or after (ISO 8601; UTC when no offset)"))] = None,
    until: Annotated[FilterMoment | None, Query(description=(
        "events before (ISO 8601; UTC when no offset)"))] = None,
    sign_ins: Annotated[bool, Query(description="include successful sign-ins "
                                                "(auth.sign_in)")] = True,
) -> AuditFilters:
    return AuditFilters(tenant=tenant, actor=actor, action=action, since=since, until=until,
                        sign_ins=sign_ins)


@router.get("", response_model=Page[AuditEventOut],
            summary="List audit events", responses=problems(403, 404))
def list_audit_events(
    principal: CurrentPrincipal, db: DbSession,
    filters: Annotated[AuditFilters, Depends(audit_filters)],
    params: Paging,
) -> Response:
    """Who changed what, newest first: actor, tenant, action, target and before/after. Tenant
    admins see their tenants' events, platform admins all of them. Filter by tenant, actor
    email, action (`quota.` for a family) and a time range; sign-ins only with `sign_ins`."""
    return page_response(*list_event_fields(db, principal, filters, params))


def list_event_fields(
    db: Session, principal: Principal, filters: AuditFilters, params: PageParams,
    *, for_reading: bool = False,
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the events the caller may see, newest first, as ``AuditEventOut`` fields (and
    with ``for_reading``, what the page shows besides)."""
    tenant_ids = tenant_ids_managed_by(principal)
    if filters.tenant:
        tenant_ids = [tenant_for(db, principal, filters.tenant, "manage").id]
    elif tenant_ids == []:
        raise Forbidden("the audit log is for tenant admins and platform admins")
    return service.page_of_events(db, tenant_ids, filters, params, for_reading=for_reading)
