"""REST: GPU-hours per tenant, class and period, as JSON or as a CSV download."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from starlette.responses import StreamingResponse

from app.auth.deps import CurrentPrincipal
from app.http.deps import DbSession
from app.http.problems import problems
from app.http.routing import UnitOfWorkRoute
from app.usage import ledger, service
from app.usage.csv_export import cluster_csv_chunks, csv_chunks
from app.usage.schemas import ClusterUsageReport, GroupBy, UsageFilters, UsageReport

router = APIRouter(prefix="/api/v1", tags=["usage"], route_class=UnitOfWorkRoute)
DEFAULT_DAYS = 30
CSV_ROWS = {200: {"content": {"text/csv": {}}, "description": "the rows as CSV"},
            **problems(404)}


async def usage_filters(
    start: Annotated[datetime | None, Query(alias="from", description=(
        "start, inclusive (ISO 8601; UTC when no offset); default: 30 days before 'to'"))] = None,
    end: Annotated[datetime | None, Query(alias="to", description=(
        "end, exclusive; default: the end of today (UTC)"))] = None,
    tenant: Annotated[str | None, Query(max_length=30, description=(
        "one tenant's slug; default: every tenant you may see"))] = None,
    group_by: Annotated[GroupBy, Query(description="one row per day or per month (UTC)")] = "day",
) -> UsageFilters:
    if end is None:
        today = ledger.now_in_seconds().replace(hour=0, minute=0, second=0)
        end = today + timedelta(days=1)
    end = service.report_bound(end, "to")
    start = end - timedelta(days=DEFAULT_DAYS) if start is None else service.report_bound(
        start, "from")
    return UsageFilters(start=start, end=end, tenant=tenant, group_by=group_by)


Filters = Annotated[UsageFilters, Depends(usage_filters)]


@router.get("/usage", response_model=UsageReport,
            summary="GPU-hours per tenant", responses=problems(404))
def usage(db: DbSession, principal: CurrentPrincipal, filters: Filters) -> UsageReport:
    """GPU-hours per tenant, GPU class and day or month: approved, allocated, in use, and in use
    split into guaranteed and burst. Tenant members see their tenants, platform admins all."""
    return service.report(db, principal, filters)


@router.get("/usage.csv", response_class=StreamingResponse,
            summary="GPU-hours per tenant as CSV", responses=CSV_ROWS)
def usage_csv(db: DbSession, principal: CurrentPrincipal, filters: Filters) -> StreamingResponse:
    """The same rows as `GET /api/v1/usage`, as a CSV download."""
    report = service.report(db, principal, filters)
    name = f"gpu-usage-{report.start:%Y%m%d}-{report.end:%Y%m%d}.csv"
    return StreamingResponse(csv_chunks(report.rows), media_type="text/csv; charset=utf-8",
                             headers={"Content-Disposition": f'attachment; filename="{name}"',
                                      "Cache-Control": "no-store"})


@router.get("/usage/clusters", response_model=ClusterUsageReport,
            summary="GPU-hours per cluster", responses=problems(404))
def usage_by_cluster(db: DbSession, principal: CurrentPrincipal,
                     filters: Filters) -> ClusterUsageReport:
    """GPU-hours per cluster, class and period: allocated, and in use split into guaranteed and
    burst (burst may be charged at its own rate)."""
    return service.cluster_report(db, principal, filters)


@router.get("/usage/clusters.csv", response_class=StreamingResponse,
            summary="GPU-hours per cluster as CSV", responses=CSV_ROWS)
def usage_by_cluster_csv(db: DbSession, principal: CurrentPrincipal,
                         filters: Filters) -> StreamingResponse:
    """The same rows as `GET /api/v1/usage/clusters`, as a CSV download."""
    report = service.cluster_report(db, principal, filters)
    name = f"gpu-usage-clusters-{report.start:%Y%m%d}-{report.end:%Y%m%d}.csv"
    return StreamingResponse(cluster_csv_chunks(report.rows),
                             media_type="text/csv; charset=utf-8",
                             headers={"Content-Disposition": f'attachment; filename="{name}"',
                                      "Cache-Control": "no-store"})
