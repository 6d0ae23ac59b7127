"""HTML: capacity per host, region and GPU class, with region, host and class filters; the
GPU-hours sleep freed per class and day."""

from __future__ import annotations

from fastapi import APIRouter, Request
from markupsafe import Markup
from starlette.responses import Response

from app.auth.deps import CurrentPrincipal
from app.fleet import asleep_clusters, freed_hours, service
from app.fleet.api import Filters, SleepDays
from app.fleet.schemas import FleetSleepOut
from app.gpu_classes.charts import capacity_chart
from app.http.deps import DbSession
from app.http.pagination import PageParams
from app.http.routing import UnitOfWorkRoute
from app.usage.pages import class_styles
from app.web.charts import series as time_series
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)


@router.get("/admin/fleet/hosts")
def fleet_hosts(request: Request, db: DbSession, principal: CurrentPrincipal,
                filters: Filters) -> Response:
    everything = service.capacity(db, principal, service.FleetFilters())
    shown = (everything if filters == service.FleetFilters()
             else service.capacity(db, principal, filters))
    return render(request, "fleet/hosts.html", {
        "filters": filters, "hosts": shown.hosts, "regions": shown.regions,
        "classes": shown.classes,
        "region_names": sorted({h.region for h in everything.hosts}),
        "host_names": sorted({h.host_cluster for h in everything.hosts}),
        "class_names": sorted({(h.gpu_class, h.display_name) for h in everything.hosts}),
        "host_chart": capacity_chart(
            "host-capacity-chart", "GPUs per host and GPU class",
            [(f"{h.host_cluster} · {h.display_name}", h) for h in shown.hosts]),
        "region_chart": capacity_chart(
            "region-capacity-chart", "GPUs per region and GPU class",
            [(f"{r.region or '(no region)'} · {r.display_name}", r) for r in shown.regions]),
    })


@router.get("/admin/fleet/sleep")
def fleet_sleep(request: Request, db: DbSession, principal: CurrentPrincipal,
                days: SleepDays = freed_hours.DEFAULT_DAYS) -> Response:
    freed = freed_hours.freed_by_sleep(db, principal, days)
    return render(request, "fleet/freed_hours.html", {"freed": freed,
                                                      "chart": _sleep_chart(db, freed)})


def _sleep_chart(db: DbSession, freed: FleetSleepOut) -> Markup:
    styles = class_styles(db)
    return time_series.stacked_bars(
        "GPU-hours freed by sleep per day (UTC), by GPU class",
        f"GPU-hours that sleeping clusters of every tenant gave back to the shared pool each "
        f"day (UTC) from {freed.days[0]} to {freed.days[-1]} (today, so far), stacked by GPU "
        "class. The table below lists the figures.", freed.days,
        [time_series.Series(c.display_name, [d.slept_gpu_hours for d in c.days],
                            *styles.get(c.gpu_class, (None, None)))
         for c in freed.classes], "GPU-hours")


@router.get("/admin/fleet/sleeping")
def sleeping_clusters(request: Request, db: DbSession, principal: CurrentPrincipal) -> Response:
    page = asleep_clusters.sleeping_clusters(db, principal, PageParams(limit=200))
    return render(request, "fleet/sleeping_clusters.html",
                  {"clusters": page.items, "more": page.next_cursor is not None})
