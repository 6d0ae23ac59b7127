"""REST: issue, list and revoke kubeconfigs of a virtual cluster.

Issuing takes no ``Idempotency-Key``: a replay would have to store the response, and the
token must never be stored. A retried request simply gets a grant of its own.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from starlette.responses import JSONResponse, Response

from app.auth.deps import CurrentPrincipal
from app.http.deps import DbSession, RowId
from app.http.pagination import Page, Paging
from app.http.problems import problems
from app.http.routing import UnitOfWorkRoute
from app.kubeconfigs import service
from app.kubeconfigs.schemas import GrantOut, IssuedKubeconfig, KubeconfigRequest
from app.kubeconfigs.service import VirtualClusters

WAKE_RETRY_SECONDS = 10
router = APIRouter(prefix="/api/v1/tenants/{tenant}/clusters/{cluster}/kubeconfigs",
                   tags=["kubeconfigs"], route_class=UnitOfWorkRoute)
YAML = "application/yaml"


async def virtual_clusters(request: Request) -> VirtualClusters:
    return VirtualClusters.from_settings(request.app.state.settings, request.app.state.kube)


Clusters = Annotated[VirtualClusters, Depends(virtual_clusters)]


def kubeconfig_response(issued: IssuedKubeconfig, *, attachment: bool = True) -> Response:
    """The YAML, never cached anywhere on the way."""
    disposition = "attachment" if attachment else "inline"
    headers = {
        "Cache-Control": "no-store",
        "Pragma": "no-cache",
        "Content-Disposition": f"{disposition}; filename*=UTF-8''{quote(issued.filename)}",
        "X-Kubeconfig-Grant": str(issued.grant.id),
        "X-Kubeconfig-Expires-At": issued.grant.expires_at.isoformat(),
    }
    return Response(issued.yaml, status_code=201, media_type=YAML, headers=headers)


@router.post("", status_code=201, response_class=Response, summary="Get a kubeconfig", responses={
    201: {"description": "the kubeconfig; its grant id in X-Kubeconfig-Grant",
          "content": {YAML: {"schema": {"type": "string"}}}},
    202: {"description": "the cluster was asleep (asking woke it) or is waking up: ask again "
                         "once it is Ready (Retry-After)"},
    **problems(403, 404, 409)})
def issue(tenant: str, cluster: str, payload: KubeconfigRequest, db: DbSession,
          principal: CurrentPrincipal, clusters: Clusters, request: Request) -> Response:
    """Issues a kubeconfig for the cluster with a role (`admin`, `edit` or `view`) and a lifetime,
    as `application/yaml`; its grant id is in `X-Kubeconfig-Grant` and its expiry in
    `X-Kubeconfig-Expires-At`. 403 for a role yours does not allow or a suspended tenant;
    409 while the cluster is not Ready or is being deleted; 202 when it is asleep or waking
    (asking wakes it): ask again once it is Ready. The token is never stored, so ask again
    rather than replay. Audited."""
    issued = service.issue_kubeconfig(db, principal, clusters, request.app.state.settings,
                                      tenant, cluster, payload)
    if issued is None:
        return JSONResponse(status_code=202, headers={"Retry-After": str(WAKE_RETRY_SECONDS)},
                            content={"detail": f"cluster {cluster} is waking up: ask again "
                                               "once it is Ready", "phase": "Waking"})
    return kubeconfig_response(issued)


@router.get("", response_model=Page[GrantOut],
            summary="List kubeconfig grants", responses=problems(404))
def list_grants(tenant: str, cluster: str, db: DbSession, principal: CurrentPrincipal,
                paging: Paging) -> Page[GrantOut]:
    """The cluster's active kubeconfig grants: all of them for tenant admins, your own for
    everyone else."""
    return service.list_active_grants(db, principal, tenant, cluster, paging)


@router.delete("/{grant_id}", status_code=204,
               summary="Revoke a kubeconfig", responses=problems(403, 404))
def revoke(tenant: str, cluster: str, grant_id: RowId, db: DbSession,
           principal: CurrentPrincipal, clusters: Clusters) -> Response:
    """Revokes a kubeconfig: its token stops working at once. Your own, or anyone's for tenant
    admins. Audited."""
    service.revoke_grant(db, principal, clusters, tenant, cluster, grant_id)
    return Response(status_code=204)


grants_router = APIRouter(prefix="/api/v1/kubeconfig-grants", tags=["kubeconfigs"],
                          route_class=UnitOfWorkRoute)


@grants_router.delete("/{grant_id}", status_code=204,
                      summary="Revoke a kubeconfig by its grant id", responses=problems(403, 404))
def revoke_by_id(grant_id: RowId, db: DbSession, principal: CurrentPrincipal,
                 clusters: Clusters) -> Response:
    """Revokes a kubeconfig given only its grant id (the `X-Kubeconfig-Grant` header of the
    issue; ids are unique across tenants): its token stops working at once. Your own, or
    anyone's for the tenant's admins; 404 for a grant of a tenant you do not belong to.
    Audited."""
    service.revoke_grant_by_id(db, principal, clusters, grant_id)
    return Response(status_code=204)
