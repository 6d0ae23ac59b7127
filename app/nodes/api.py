"""REST: the node inventory, dedicated assignment, node suggestions and a tenant's nodes."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from starlette.responses import Response

from app.auth.deps import CurrentPrincipal
from app.authz.routes import PLATFORM_WRITE
from app.http.deps import DbSession
from app.http.json_body import page_response
from app.http.pagination import Page, Paging
from app.http.problems import problems
from app.http.routing import UnitOfWorkRoute
from app.nodes import service
from app.nodes.repository import NodeFilters
from app.nodes.schemas import (
    AssignmentIn,
    NodeDetail,
    NodeOut,
    SuggestionIn,
    SuggestionOut,
    TenantNodeOut,
)

router = APIRouter(prefix="/api/v1", tags=["nodes"], route_class=UnitOfWorkRoute)
HostCluster = Annotated[str | None, Query(
    max_length=63, description="the host cluster's name; the default one when left out")]


async def node_filters(
    gpu_class: Annotated[str | None, Query(max_length=200, description="GPU product")] = None,
    zone: Annotated[str | None, Query(max_length=100)] = None,
    rack: Annotated[str | None, Query(max_length=100)] = None,
    tenant: Annotated[str | None, Query(max_length=30, description="dedicated to")] = None,
    ready: Annotated[str | None, Query(pattern="^(true|false)?$",
                                       description="true or false; empty for any")] = None,
    include_gone: Annotated[bool, Query(description="also nodes gone from the host")] = False,
) -> NodeFilters:
    return NodeFilters(gpu_class=gpu_class, zone=zone, rack=rack, tenant=tenant,
                       ready={"true": True, "false": False}.get(ready or ""),
                       include_gone=include_gone)


Filters = Annotated[NodeFilters, Depends(node_filters)]
NodeSort = Literal["id", "name", "rack"]
SortQuery = Annotated[NodeSort, Query(
    description="id (the default: the order nodes were first seen), name, or rack (then name); "
                "next_cursor continues in the same order")]


@router.get("/nodes", response_model=Page[NodeOut],
            summary="List nodes", responses=problems(403, 404))
def list_nodes(db: DbSession, principal: CurrentPrincipal, paging: Paging, filters: Filters,
               host_cluster: HostCluster = None, sort: SortQuery = "id") -> Response:
    """The host cluster's GPU nodes as the inventory sync saw them: GPU class, GPUs, topology
    (zone, rack, NVLink clique), readiness and the tenant each is dedicated to (platform
    admins). Filters narrow the list; 404 for an unknown host cluster."""
    return page_response(*service.list_node_fields(db, principal, filters, paging,
                                                   host_cluster, sort))


@router.get("/nodes/{node}", response_model=NodeDetail,
            summary="Get a node", responses=problems(403, 404))
def get_node(node: str, db: DbSession, principal: CurrentPrincipal,
             host_cluster: HostCluster = None) -> NodeDetail:
    """One node with its labels, GPUs, readiness and dedicated assignment (platform admins)."""
    return service.get_node(db, principal, node, host_cluster)


@router.put("/nodes/{node}/assignment", dependencies=PLATFORM_WRITE, response_model=NodeDetail,
            summary="Dedicate a node to a tenant", responses=problems(403, 404, 409))
def assign_node(node: str, payload: AssignmentIn, db: DbSession, principal: CurrentPrincipal,
                host_cluster: HostCluster = None) -> NodeDetail:
    """Dedicates the node to a tenant (platform admins): the worker labels and taints it so that
    only that tenant's clusters run there. 409 when it is dedicated to another tenant or
    the tenant's approved quota of its class would be exceeded. Audited."""
    return service.assign_node(db, principal, node, payload, host_cluster)


@router.delete("/nodes/{node}/assignment", dependencies=PLATFORM_WRITE, status_code=204,
               summary="End a node's dedication", responses=problems(403, 404))
def end_assignment(node: str, db: DbSession, principal: CurrentPrincipal,
                   host_cluster: HostCluster = None) -> Response:
    """Gives the node back to the shared pool (platform admins); the worker removes its tenant
    label and taint. Audited."""
    service.end_assignment(db, principal, node, host_cluster)
    return Response(status_code=204)


@router.post("/node-suggestions", dependencies=PLATFORM_WRITE, response_model=SuggestionOut,
             summary="Suggest nodes to dedicate", responses=problems(403, 404, 409))
def suggest_nodes(payload: SuggestionIn, db: DbSession, principal: CurrentPrincipal,
                  host_cluster: HostCluster = None) -> SuggestionOut:
    """Suggests free nodes of a class to dedicate to a tenant, kept together by topology (platform
    admins). Nothing is assigned until each node's assignment is PUT."""
    return service.suggest_nodes(db, principal, payload, host_cluster)


@router.get("/tenants/{tenant}/nodes", response_model=Page[TenantNodeOut],
            summary="List a tenant's dedicated nodes", responses=problems(404))
def tenant_nodes(tenant: str, db: DbSession, principal: CurrentPrincipal,
                 paging: Paging) -> Page[TenantNodeOut]:
    """The nodes dedicated to this tenant, with their GPUs and readiness."""
    return service.tenant_nodes(db, principal, tenant, paging)
