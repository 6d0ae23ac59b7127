"""REST: cluster templates (platform admins write, everyone reads the offered ones) and the
upgrade of a cluster to a newer version of its template."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from starlette.responses import JSONResponse

from app.auth.deps import CurrentPrincipal
from app.auth.idempotency import IdempotencyKeyHeader, run_idempotent
from app.authz import ensure_platform_writer
from app.clusters.schemas import ClusterOut
from app.http.deps import DbSession, get_settings_dep
from app.http.routing import UnitOfWorkRoute
from app.kit.config import Settings
from app.templates import service
from app.templates.schemas import (
    ClusterUpgradeIn,
    TemplateCreate,
    TemplateOut,
    VersionEdit,
    VersionOut,
)

router = APIRouter(prefix="/api/v1/cluster-templates", tags=["cluster templates"],
                   route_class=UnitOfWorkRoute)
cluster_router = APIRouter(prefix="/api/v1/tenants/{tenant}/clusters/{cluster}",
                           tags=["clusters"], route_class=UnitOfWorkRoute)
AppSettings = Annotated[Settings, Depends(get_settings_dep)]
VersionNumber = Annotated[int, Path(ge=1, le=1_000_000, description="the version number")]
TemplateName = Annotated[str, Path(max_length=40)]


@router.get("", response_model=list[TemplateOut])
def list_templates(db: DbSession, principal: CurrentPrincipal) -> list[TemplateOut]:
    return service.list_templates(db, principal)


@router.post("", status_code=201, response_model=TemplateOut)
def create_template(request: Request, payload: TemplateCreate, db: DbSession,
                    principal: CurrentPrincipal,
                    key: IdempotencyKeyHeader = None) -> JSONResponse:
    """A template with version 1 as a draft; validate and offer it before tenants see it."""
    return run_idempotent(db, principal, key, path=request.url.path, payload=payload,
                          allowed=lambda: ensure_platform_writer(principal),
                          create=lambda: service.create_template(db, principal, payload))


@router.get("/{name}", response_model=TemplateOut)
def get_template(name: TemplateName, db: DbSession, principal: CurrentPrincipal) -> TemplateOut:
    return service.get_template(db, principal, name)


@router.post("/{name}/versions", status_code=201, response_model=VersionOut)
def new_version(name: TemplateName, payload: VersionEdit, db: DbSession,
                principal: CurrentPrincipal) -> VersionOut:
    """Editing: a new draft with the newest version's settings and the given ones replaced."""
    return service.new_version(db, principal, name, payload)


@router.post("/{name}/versions/{version}/validate", status_code=202, response_model=VersionOut)
def validate_version(name: TemplateName, version: VersionNumber, db: DbSession,
                     principal: CurrentPrincipal) -> VersionOut:
    """Queues every check (rendering, chart schema, edition, allowlist, host dry-run, host
    support, add-on charts and their settings) for the worker, which stores the result with
    the version: ``validation_pending`` until then."""
    return service.request_validation(db, principal, name, version)


@router.post("/{name}/versions/{version}/offer", response_model=VersionOut)
def offer_version(name: TemplateName, version: VersionNumber, db: DbSession,
                  principal: CurrentPrincipal) -> VersionOut:
    """409 with the failed checks' reasons unless the stored validation passed."""
    return service.offer_version(db, principal, name, version)


@router.post("/{name}/versions/{version}/retire", response_model=VersionOut)
def retire_version(name: TemplateName, version: VersionNumber, db: DbSession,
                   principal: CurrentPrincipal) -> VersionOut:
    return service.retire_version(db, principal, name, version)


@cluster_router.post("/template-upgrade", response_model=ClusterOut)
def upgrade_cluster(tenant: str, cluster: str, payload: ClusterUpgradeIn, db: DbSession,
                    principal: CurrentPrincipal, settings: AppSettings) -> ClusterOut:
    """Move the cluster to a newer offered version of its template; the worker applies it."""
    return service.upgrade_cluster(db, principal, settings, tenant, cluster, payload.version)
