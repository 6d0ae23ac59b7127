"""REST: a tenant's virtual clusters, with their conditions (never their credentials)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import JSONResponse, Response

from app.auth.deps import CurrentPrincipal
from app.auth.idempotency import IdempotencyKeyHeader, run_idempotent
from app.clusters import service
from app.clusters.schemas import (
    ClusterCreate,
    ClusterOut,
    ClusterPreview,
    ClusterResize,
    SleepPolicyIn,
)
from app.clusters.shapes import TemplateResolver, template_resolver
from app.http.deps import DbSession, get_settings_dep
from app.http.json_body import page_response
from app.http.pagination import Page, Paging
from app.http.routing import UnitOfWorkRoute
from app.kit.config import Settings

router = APIRouter(prefix="/api/v1/tenants/{tenant}/clusters", tags=["clusters"],
                   route_class=UnitOfWorkRoute)
# Sleep and wake and the sleep policy: asked seldom, so tried after the hot routers.
power_router = APIRouter(prefix="/api/v1/tenants/{tenant}/clusters", tags=["clusters"],
                         route_class=UnitOfWorkRoute)
AppSettings = Annotated[Settings, Depends(get_settings_dep)]
Resolver = Annotated[TemplateResolver | None, Depends(template_resolver)]


@router.get("", response_model=Page[ClusterOut])
def list_clusters(tenant: str, db: DbSession, principal: CurrentPrincipal,
                  paging: Paging) -> Response:
    return page_response(*service.list_cluster_fields(db, principal, tenant, paging))


@router.post("", status_code=201, response_model=ClusterOut)
def create_cluster(request: Request, tenant: str, payload: ClusterCreate, db: DbSession,
                   principal: CurrentPrincipal, settings: AppSettings, resolver: Resolver,
                   key: IdempotencyKeyHeader = None) -> JSONResponse:
    return run_idempotent(
        db, principal, key, path=request.url.path, payload=payload,
        allowed=lambda: service.tenant_to_create_in(db, principal, tenant),
        create=lambda: service.create_cluster(db, principal, settings, tenant, payload,
                                             resolver))


@router.get("/{cluster}", response_model=ClusterOut)
def get_cluster(tenant: str, cluster: str, db: DbSession,
                principal: CurrentPrincipal) -> ClusterOut:
    return service.get_cluster(db, principal, tenant, cluster)


@router.patch("/{cluster}", response_model=ClusterOut)
def resize_cluster(tenant: str, cluster: str, payload: ClusterResize, db: DbSession,
                   principal: CurrentPrincipal) -> ClusterOut:
    return service.resize_cluster(db, principal, tenant, cluster, payload)


@router.delete("/{cluster}", status_code=202, response_model=ClusterOut)
def delete_cluster(tenant: str, cluster: str, db: DbSession,
                   principal: CurrentPrincipal) -> ClusterOut:
    """Accepted: the worker revokes kubeconfigs and removes everything, then the cluster."""
    return service.delete_cluster(db, principal, tenant, cluster)


@router.get("/{cluster}/manifests", response_model=ClusterPreview)
def cluster_manifests(tenant: str, cluster: str, db: DbSession, principal: CurrentPrincipal,
                      settings: AppSettings) -> ClusterPreview:
    """The host objects and vcluster.yaml the worker applies, for review."""
    return service.preview(db, principal, settings, tenant, cluster)


@power_router.post("/{cluster}/sleep", status_code=202, response_model=ClusterOut)
def sleep_cluster(tenant: str, cluster: str, db: DbSession,
                  principal: CurrentPrincipal) -> ClusterOut:
    """Put the cluster to sleep (tenant admins): its pods leave the host, its control plane is
    scaled to zero and its GPU guarantee goes back to the pool; its own objects and its
    kubeconfigs are kept. Audited; asking again changes nothing."""
    return service.change_power(db, principal, tenant, cluster, "asleep")


@power_router.post("/{cluster}/wake", status_code=202, response_model=ClusterOut)
def wake_cluster(tenant: str, cluster: str, db: DbSession,
                 principal: CurrentPrincipal) -> ClusterOut:
    """Wake a sleeping cluster (tenant admins): it comes back with everything it held, and its
    guarantee with it. Audited; asking again changes nothing."""
    return service.change_power(db, principal, tenant, cluster, "awake")


@power_router.put("/{cluster}/sleep-policy", response_model=ClusterOut)
def set_sleep_policy(tenant: str, cluster: str, payload: SleepPolicyIn, db: DbSession,
                     principal: CurrentPrincipal) -> ClusterOut:
    """Set the cluster's whole sleep policy (tenant admins): sleep after idle minutes, on a
    schedule in a time zone, deletion after days asleep (announced first), or never. What is
    left out is off. Audited; the same policy again changes nothing."""
    return service.change_sleep_policy(db, principal, tenant, cluster, payload)
