"""REST: the fleet's capacity per host, region and GPU class; GPU-hours freed by sleep."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from app.auth.deps import CurrentPrincipal
from app.fleet import asleep_clusters, freed_hours, service
from app.fleet.schemas import FleetCapacityOut, FleetSleepOut, SleepingClusterOut
from app.http.deps import DbSession
from app.http.pagination import Page, Paging
from app.http.problems import problems
from app.http.routing import UnitOfWorkRoute

router = APIRouter(prefix="/api/v1", tags=["fleet"], route_class=UnitOfWorkRoute)


async def fleet_filters(
    region: Annotated[str | None, Query(max_length=63, description="only this region")] = None,
    host_cluster: Annotated[str | None, Query(max_length=63,
                                              description="only this host cluster")] = None,
    gpu_class: Annotated[str | None, Query(max_length=200, description="GPU product")] = None,
) -> service.FleetFilters:
    return service.FleetFilters(region=region, host_cluster=host_cluster, gpu_class=gpu_class)


Filters = Annotated[service.FleetFilters, Depends(fleet_filters)]


@router.get("/fleet/capacity", response_model=FleetCapacityOut,
            summary="Fleet capacity", responses=problems(403))
def fleet_capacity(db: DbSession, principal: CurrentPrincipal,
                   filters: Filters) -> FleetCapacityOut:
    """GPU capacity per host and class, and per region and class: total, dedicated, guaranteed,
    free, in use and borrowed (platform admins)."""
    return service.capacity(db, principal, filters)


SleepDays = Annotated[int, Query(ge=1, le=freed_hours.MAX_DAYS, description=(
    "how many UTC days up to and with today; default: today and the 7 days before"))]


@router.get("/fleet/sleep", response_model=FleetSleepOut,
            summary="GPU-hours freed by sleep", responses=problems(403))
def fleet_sleep(db: DbSession, principal: CurrentPrincipal,
                days: SleepDays = freed_hours.DEFAULT_DAYS) -> FleetSleepOut:
    """GPU-hours sleeping clusters gave back to the shared pool, per GPU class and day over all
    tenants (platform admins)."""
    return freed_hours.freed_by_sleep(db, principal, days)


@router.get("/admin/sleeping-clusters", response_model=Page[SleepingClusterOut],
            summary="List sleeping clusters", responses=problems(403))
def sleeping_clusters(db: DbSession, principal: CurrentPrincipal,
                      paging: Paging) -> Page[SleepingClusterOut]:
    """Every cluster asleep or going to sleep, with its tenant, why, since when and when its sleep
    policy deletes it (platform admins)."""
    return asleep_clusters.sleeping_clusters(db, principal, paging)
