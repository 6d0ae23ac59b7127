"""REST: GPU utilisation of a cluster and of a tenant, and the idle GPUs for platform admins."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from app.auth.deps import CurrentPrincipal
from app.http.deps import DbSession, get_settings_dep
from app.http.problems import problems
from app.http.routing import UnitOfWorkRoute
from app.kit.config import Settings
from app.utilisation import service
from app.utilisation.schemas import ClusterUtilisationOut, IdleGpusOut, TenantUtilisationOut

router = APIRouter(prefix="/api/v1", tags=["utilisation"], route_class=UnitOfWorkRoute)
AppSettings = Annotated[Settings, Depends(get_settings_dep)]


@router.get("/tenants/{tenant}/clusters/{cluster}/utilisation",
            response_model=ClusterUtilisationOut, summary="A cluster's GPU utilisation",
            responses=problems(404))
def cluster_utilisation(
    tenant: str, cluster: str, db: DbSession, principal: CurrentPrincipal,
    settings: AppSettings,
    history: Annotated[bool, Query(description="add the mean over the last day")] = False,
) -> ClusterUtilisationOut:
    """The cluster's GPUs as the DCGM exporter reports them through the operator's Prometheus:
    mean utilisation now, GPUs bound, GPUs idle past the window. Without Prometheus (not
    configured, down or slow) `known` is false, `reason` says why and every figure is null.
    Any member of the tenant may look."""
    return service.cluster_utilisation(db, principal, settings, tenant, cluster,
                                       history=history)


@router.get("/tenants/{tenant}/utilisation", response_model=TenantUtilisationOut,
            summary="A tenant's GPU utilisation", responses=problems(404))
def tenant_utilisation(tenant: str, db: DbSession, principal: CurrentPrincipal,
                       settings: AppSettings) -> TenantUtilisationOut:
    """All the tenant's GPUs now and per cluster (its dedicated nodes without a pod of one of
    its clusters as `cluster: null`); unknown as on the cluster's."""
    return service.tenant_utilisation(db, principal, settings, tenant)


@router.get("/admin/idle-gpus", response_model=IdleGpusOut,
            summary="GPUs bound but idle", responses=problems(403))
def idle_gpus(db: DbSession, principal: CurrentPrincipal,
              settings: AppSettings) -> IdleGpusOut:
    """Every GPU a tenant holds whose highest utilisation over the idle window is below the
    idle threshold, by tenant and cluster (platform admins); `items` null when unknown."""
    return service.idle_gpus(db, principal, settings)
