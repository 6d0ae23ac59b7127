"""HTML: the cluster page's utilisation panel (loaded after the page, so a slow Prometheus never
holds the page) and the admins' idle-GPU view."""

from __future__ import annotations

from datetime import UTC
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from markupsafe import Markup
from starlette.responses import Response

from app.auth.deps import CurrentPrincipal
from app.http.deps import DbSession, get_settings_dep
from app.http.routing import UnitOfWorkRoute
from app.kit.config import Settings
from app.utilisation import service
from app.utilisation.schemas import ClusterUtilisationOut
from app.web.charts.series import Series, lines
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)
AppSettings = Annotated[Settings, Depends(get_settings_dep)]


@router.get("/t/{tenant}/clusters/{cluster}/utilisation")
def cluster_panel(request: Request, tenant: str, cluster: str, db: DbSession,
                  principal: CurrentPrincipal, settings: AppSettings) -> Response:
    shown = service.cluster_utilisation(db, principal, settings, tenant, cluster, history=True)
    return render(request, "utilisation/_cluster.html",
                  {"u": shown, "chart": _chart(shown)})


def _chart(shown: ClusterUtilisationOut) -> Markup | None:
    if not shown.history:
        return None
    times = [f"{p.at.astimezone(UTC):%H:%M}" for p in shown.history]
    values = [p.utilisation_percent for p in shown.history]
    return lines(f"{shown.cluster}: mean GPU utilisation, last 24 hours (UTC)",
                 "Mean DCGM_FI_DEV_GPU_UTIL of the cluster's GPUs every 15 minutes. ",
                 times, [Series("utilisation", values)], "%")


@router.get("/admin/idle-gpus")
def idle_gpus_page(request: Request, db: DbSession, principal: CurrentPrincipal,
                   settings: AppSettings) -> Response:
    return render(request, "utilisation/idle_gpus.html",
                  {"idle": service.idle_gpus(db, principal, settings)})
