"""REST: cluster templates (platform admins write, everyone reads the offered ones) and the
upgrade of a cluster to a newer version of its template."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from starlette.responses import Response

from app.auth.deps import CurrentPrincipal
from app.auth.idempotency import IdempotencyKeyHeader, run_idempotent
from app.authz import ensure_platform_writer
from app.authz.routes import PLATFORM_WRITE
from app.clusters.schemas import ClusterOut
from app.http.deps import DbSession, get_settings_dep
from app.http.problems import problems
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


@router.get("", response_model=list[TemplateOut], summary="List cluster templates")
def list_templates(db: DbSession, principal: CurrentPrincipal) -> list[TemplateOut]:
    """Cluster templates and their versions: platform admins see every version, everyone else the
    offered ones."""
    return service.list_templates(db, principal)


@router.post("", dependencies=PLATFORM_WRITE, status_code=201, response_model=TemplateOut,
             summary="Create a cluster template", responses=problems(403, 409))
def create_template(request: Request, payload: TemplateCreate, db: DbSession,
                    principal: CurrentPrincipal,
                    key: IdempotencyKeyHeader = None) -> Response:
    """A template with version 1 as a draft (platform admins); validate and offer it before
    tenants see it. 409 when the name is taken. Audited."""
    return run_idempotent(db, principal, key, path=request.url.path, payload=payload,
                          allowed=lambda: ensure_platform_writer(principal),
                          create=lambda: service.create_template(db, principal, payload))


@router.get("/{name}", response_model=TemplateOut,
            summary="Get a cluster template", responses=problems(404))
def get_template(name: TemplateName, db: DbSession, principal: CurrentPrincipal) -> TemplateOut:
    """One template with its versions, their settings and validation results."""
    return service.get_template(db, principal, name)


@router.post("/{name}/versions", status_code=201, response_model=VersionOut,
             dependencies=PLATFORM_WRITE,
             summary="Edit a template (new version)", responses=problems(403, 404, 409))
def new_version(name: TemplateName, payload: VersionEdit, db: DbSession,
                principal: CurrentPrincipal) -> VersionOut:
    """Editing: a new draft version with the newest version's settings and the given ones replaced
    (platform admins). Versions never change once made. Audited."""
    return service.new_version(db, principal, name, payload)


@router.post("/{name}/versions/{version}/validate", status_code=202, response_model=VersionOut,
             dependencies=PLATFORM_WRITE,
             summary="Validate a template version", responses=problems(403, 404, 409))
def validate_version(name: TemplateName, version: VersionNumber, db: DbSession,
                     principal: CurrentPrincipal) -> VersionOut:
    """Queues every check (rendering, chart schema, edition, allowlist, host dry-run, host
    support, add-on charts and their settings) for the worker, which stores the result with
    the version: `validation_pending` until then (platform admins)."""
    return service.request_validation(db, principal, name, version)


@router.post("/{name}/versions/{version}/offer", response_model=VersionOut,
             dependencies=PLATFORM_WRITE,
             summary="Offer a template version", responses=problems(403, 404, 409))
def offer_version(name: TemplateName, version: VersionNumber, db: DbSession,
                  principal: CurrentPrincipal) -> VersionOut:
    """Offers a validated version to tenants (platform admins). 409 with the failed checks'
    reasons unless its stored validation passed. Audited."""
    return service.offer_version(db, principal, name, version)


@router.post("/{name}/versions/{version}/retire", response_model=VersionOut,
             dependencies=PLATFORM_WRITE,
             summary="Retire a template version", responses=problems(403, 404, 409))
def retire_version(name: TemplateName, version: VersionNumber, db: DbSession,
                   principal: CurrentPrincipal) -> VersionOut:
    """Stops offering a version to new clusters; clusters on it keep it (platform admins).
    Audited."""
    return service.retire_version(db, principal, name, version)


@cluster_router.post("/template-upgrade", response_model=ClusterOut,
                     summary="Upgrade a cluster's template", responses=problems(403, 404, 409))
def upgrade_cluster(tenant: str, cluster: str, payload: ClusterUpgradeIn, db: DbSession,
                    principal: CurrentPrincipal, settings: AppSettings) -> ClusterOut:
    """Moves the cluster to a newer offered version of its template (tenant admins); the worker
    applies it. 409 when the version is not newer, not offered, or does not fit the
    cluster. Audited."""
    return service.upgrade_cluster(db, principal, settings, tenant, cluster, payload.version)
