"""REST: host clusters, for platform admins. Credentials go in and never come out."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from starlette.responses import Response

from app.auth.deps import CurrentPrincipal
from app.auth.idempotency import IdempotencyKeyHeader, run_idempotent
from app.authz import ensure_platform_writer
from app.authz.routes import PLATFORM_WRITE
from app.hosts import service
from app.hosts.health import ChartProbe
from app.hosts.schemas import HostCredentialsIn, HostOut, HostRegister, HostUpdate, StateChange
from app.http.deps import DbSession, get_settings_dep
from app.http.pagination import Page, Paging
from app.http.problems import problems
from app.http.routing import UnitOfWorkRoute
from app.kit.config import Settings
from app.kube.connector import KubeConnector

router = APIRouter(prefix="/api/v1/host-clusters", tags=["host clusters"],
                   route_class=UnitOfWorkRoute)
HostName = Annotated[str, Path(max_length=63, description="the host cluster's name")]


async def kube_connector(request: Request) -> KubeConnector:
    connector: KubeConnector = request.app.state.kube
    return connector


async def chart_probe(request: Request) -> ChartProbe | None:
    """The templates domain's chart resolver, set on the app at start (hosts cannot import
    templates: it sits below them)."""
    found: ChartProbe | None = getattr(request.app.state, "chart_resolver", None)
    return found


NO_REASON = StateChange()  # the body is optional
AppSettings = Annotated[Settings, Depends(get_settings_dep)]
Connector = Annotated[KubeConnector, Depends(kube_connector)]
Charts = Annotated[ChartProbe | None, Depends(chart_probe)]


@router.get("", response_model=Page[HostOut],
            summary="List host clusters", responses=problems(403))
def list_hosts(db: DbSession, principal: CurrentPrincipal, paging: Paging) -> Page[HostOut]:
    """The host clusters the portal manages, with region, state and health (platform admins).
    Credentials never come out."""
    return service.list_hosts(db, principal, paging)


@router.post("", dependencies=PLATFORM_WRITE, status_code=201, response_model=HostOut,
             summary="Register a host cluster", responses=problems(403, 409))
def register_host(request: Request, payload: HostRegister, db: DbSession,
                  principal: CurrentPrincipal, settings: AppSettings,
                  key: IdempotencyKeyHeader = None) -> Response:
    """Registers a host cluster with its API endpoint and credentials, stored encrypted (platform
    admins). 409 when the name is taken. Audited."""
    return run_idempotent(db, principal, key, path=request.url.path, payload=payload,
                          allowed=lambda: ensure_platform_writer(principal),
                          create=lambda: service.register_host(db, principal, settings,
                                                               payload))


@router.get("/{name}", response_model=HostOut,
            summary="Get a host cluster", responses=problems(403, 404))
def get_host(name: HostName, db: DbSession, principal: CurrentPrincipal) -> HostOut:
    """One host cluster with its health checks (platform admins)."""
    return service.get_host(db, principal, name)


@router.patch("/{name}", dependencies=PLATFORM_WRITE, response_model=HostOut,
              summary="Update a host cluster", responses=problems(403, 404, 409))
def update_host(name: HostName, payload: HostUpdate, db: DbSession,
                principal: CurrentPrincipal) -> HostOut:
    """Changes a host's name, region, description, webhook URL or API rate limit (platform
    admins). Audited."""
    return service.update_host(db, principal, name, payload)


@router.put("/{name}/credentials", dependencies=PLATFORM_WRITE, response_model=HostOut,
            summary="Replace a host's credentials", responses=problems(403, 404, 409))
def replace_credentials(name: HostName, payload: HostCredentialsIn, db: DbSession,
                        principal: CurrentPrincipal, settings: AppSettings) -> HostOut:
    """Replaces the credentials the worker uses on the host, stored encrypted (platform admins).
    Audited."""
    return service.replace_credentials(db, principal, settings, name, payload)


@router.post("/{name}/cordon", dependencies=PLATFORM_WRITE, response_model=HostOut,
             summary="Cordon a host cluster", responses=problems(403, 404))
def cordon(name: HostName, db: DbSession, principal: CurrentPrincipal,
           payload: StateChange = NO_REASON) -> HostOut:
    """The host takes no new clusters; those on it stay and keep being reconciled (platform
    admins). Audited."""
    return service.set_state(db, principal, name, "cordoned", payload.reason)


@router.post("/{name}/uncordon", dependencies=PLATFORM_WRITE, response_model=HostOut,
             summary="Uncordon a host cluster", responses=problems(403, 404))
def uncordon(name: HostName, db: DbSession, principal: CurrentPrincipal,
             payload: StateChange = NO_REASON) -> HostOut:
    """The host takes new clusters again (platform admins). Audited."""
    return service.set_state(db, principal, name, "active", payload.reason)


@router.post("/{name}/drain", dependencies=PLATFORM_WRITE, response_model=HostOut,
             summary="Drain a host cluster", responses=problems(403, 404))
def drain(name: HostName, db: DbSession, principal: CurrentPrincipal,
          payload: StateChange = NO_REASON) -> HostOut:
    """Cordoned and marked for evacuation (platform admins). Moving its clusters elsewhere is not
    automated. Audited."""
    return service.set_state(db, principal, name, "draining", payload.reason)


@router.post("/{name}/check", dependencies=PLATFORM_WRITE, response_model=HostOut,
             summary="Check a host cluster now", responses=problems(403, 404))
def check(name: HostName, db: DbSession, principal: CurrentPrincipal, settings: AppSettings,
          connector: Connector, charts: Charts) -> HostOut:
    """Runs every health check now and stores the results on the host (platform admins)."""
    return service.check_host(db, principal, settings, connector, charts, name)


@router.delete("/{name}", dependencies=PLATFORM_WRITE, status_code=204,
               summary="Delete a host cluster", responses=problems(403, 404, 409))
def delete_host(name: HostName, db: DbSession, principal: CurrentPrincipal) -> Response:
    """Removes a host no node or cluster points at (platform admins); 409 otherwise. Audited."""
    service.delete_host(db, principal, name)
    return Response(status_code=204)

