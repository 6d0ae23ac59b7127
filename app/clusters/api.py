"""REST: a tenant's virtual clusters, with their conditions (never their credentials)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

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
from app.http.problems import problems
from app.http.routing import UnitOfWorkRoute
from app.kit.config import Settings

router = APIRouter(prefix="/api/v1/tenants/{tenant}/clusters", tags=["clusters"],
                   route_class=UnitOfWorkRoute)
# Sleep and wake and the sleep policy: asked seldom, so tried after the hot routers.
power_router = APIRouter(prefix="/api/v1/tenants/{tenant}/clusters", tags=["clusters"],
                         route_class=UnitOfWorkRoute)
AppSettings = Annotated[Settings, Depends(get_settings_dep)]
Resolver = Annotated[TemplateResolver | None, Depends(template_resolver)]


@router.get("", response_model=Page[ClusterOut], summary="List clusters", responses=problems(404))
def list_clusters(tenant: str, db: DbSession, principal: CurrentPrincipal,
                  paging: Paging) -> Response:
    """The tenant's virtual clusters with their placement, GPUs, state, conditions and endpoint.
    Any member of the tenant may look."""
    return page_response(*service.list_cluster_fields(db, principal, tenant, paging))


@router.post("", status_code=201, response_model=ClusterOut,
             summary="Create a cluster", responses=problems(403, 404, 409))
def create_cluster(request: Request, tenant: str, payload: ClusterCreate, db: DbSession,
                   principal: CurrentPrincipal, settings: AppSettings, resolver: Resolver,
                   key: IdempotencyKeyHeader = None) -> Response:
    """Creates a virtual cluster from a template (default: `default`), drawing GPUs of a class
    from the tenant's approved quota (tenant admins). Answers at once; the worker then
    provisions it and its conditions say how far it got. 409 when the name is taken or the
    quota or capacity is short. Audited."""
    return run_idempotent(
        db, principal, key, path=request.url.path, payload=payload,
        allowed=lambda: service.tenant_to_create_in(db, principal, tenant),
        create=lambda: service.create_cluster(db, principal, settings, tenant, payload,
                                             resolver))


@router.get("/{cluster}", response_model=ClusterOut,
            summary="Get a cluster", responses=problems(404))
def get_cluster(tenant: str, cluster: str, db: DbSession,
                principal: CurrentPrincipal) -> ClusterOut:
    """One virtual cluster: spec, generation, conditions, endpoint and GPUs in use. Never its
    credentials."""
    return service.get_cluster(db, principal, tenant, cluster)


@router.patch("/{cluster}", response_model=ClusterOut,
              summary="Resize a cluster", responses=problems(403, 404, 409))
def resize_cluster(tenant: str, cluster: str, payload: ClusterResize, db: DbSession,
                   principal: CurrentPrincipal) -> ClusterOut:
    """Changes a cluster's GPUs, CPU or memory (tenant admins); the worker applies it. 409 when
    the tenant's quota is short or the cluster is being deleted. Audited."""
    return service.resize_cluster(db, principal, tenant, cluster, payload)


@router.delete("/{cluster}", status_code=202, response_model=ClusterOut,
               summary="Delete a cluster", responses=problems(403, 404))
def delete_cluster(tenant: str, cluster: str, db: DbSession,
                   principal: CurrentPrincipal) -> ClusterOut:
    """Accepted at once: the worker revokes the cluster's kubeconfigs, uninstalls it and removes
    its namespace, then the cluster goes (tenant admins). Audited."""
    return service.delete_cluster(db, principal, tenant, cluster)


@router.get("/{cluster}/manifests", response_model=ClusterPreview,
            summary="Preview a cluster's host objects", responses=problems(404))
def cluster_manifests(tenant: str, cluster: str, db: DbSession, principal: CurrentPrincipal,
                      settings: AppSettings) -> ClusterPreview:
    """The host objects (namespace, quotas, network policy, KAI queues) and the vcluster.yaml the
    worker applies for this cluster, for review."""
    return service.preview(db, principal, settings, tenant, cluster)


@power_router.post("/{cluster}/sleep", status_code=202, response_model=ClusterOut,
                   summary="Put a cluster to sleep", responses=problems(403, 404, 409))
def sleep_cluster(tenant: str, cluster: str, db: DbSession,
                  principal: CurrentPrincipal) -> ClusterOut:
    """Puts the cluster to sleep (tenant admins): its pods leave the host, its control plane is
    scaled to zero and its GPU guarantee goes back to the pool; its own objects and its
    kubeconfigs are kept. Audited; asking again changes nothing."""
    return service.change_power(db, principal, tenant, cluster, "asleep")


@power_router.post("/{cluster}/wake", status_code=202, response_model=ClusterOut,
                   summary="Wake a cluster", responses=problems(403, 404, 409))
def wake_cluster(tenant: str, cluster: str, db: DbSession,
                 principal: CurrentPrincipal) -> ClusterOut:
    """Wakes a sleeping cluster (tenant admins): it comes back with everything it held, and its
    guarantee with it. Audited; asking again changes nothing."""
    return service.change_power(db, principal, tenant, cluster, "awake")


@power_router.put("/{cluster}/sleep-policy", response_model=ClusterOut,
                  summary="Set a cluster's sleep policy", responses=problems(403, 404))
def set_sleep_policy(tenant: str, cluster: str, payload: SleepPolicyIn, db: DbSession,
                     principal: CurrentPrincipal) -> ClusterOut:
    """Sets the cluster's whole sleep policy (tenant admins): sleep after idle minutes, on a
    schedule in a time zone, deletion after days asleep (announced first), or never. What
    is left out is off. Audited; the same policy again changes nothing."""
    return service.change_sleep_policy(db, principal, tenant, cluster, payload)
