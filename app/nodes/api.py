"""REST: the node inventory, dedicated assignment, node suggestions and a tenant's nodes."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from starlette.responses import Response

from app.auth.deps import CurrentPrincipal
from app.http.deps import DbSession
from app.http.json_body import page_response
from app.http.pagination import Page, Paging
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


@router.get("/nodes", response_model=Page[NodeOut])
def list_nodes(db: DbSession, principal: CurrentPrincipal, paging: Paging, filters: Filters,
               host_cluster: HostCluster = None, sort: SortQuery = "id") -> Response:
    return page_response(*service.list_node_fields(db, principal, filters, paging,
                                                   host_cluster, sort))


@router.get("/nodes/{node}", response_model=NodeDetail)
def get_node(node: str, db: DbSession, principal: CurrentPrincipal,
             host_cluster: HostCluster = None) -> NodeDetail:
    return service.get_node(db, principal, node, host_cluster)


@router.put("/nodes/{node}/assignment", response_model=NodeDetail)
def assign_node(node: str, payload: AssignmentIn, db: DbSession, principal: CurrentPrincipal,
                host_cluster: HostCluster = None) -> NodeDetail:
    return service.assign_node(db, principal, node, payload, host_cluster)


@router.delete("/nodes/{node}/assignment", status_code=204)
def end_assignment(node: str, db: DbSession, principal: CurrentPrincipal,
                   host_cluster: HostCluster = None) -> Response:
    service.end_assignment(db, principal, node, host_cluster)
    return Response(status_code=204)


@router.post("/node-suggestions", response_model=SuggestionOut)
def suggest_nodes(payload: SuggestionIn, db: DbSession, principal: CurrentPrincipal,
                  host_cluster: HostCluster = None) -> SuggestionOut:
    """Suggests nodes to dedicate; nothing is assigned until each node's assignment is PUT."""
    return service.suggest_nodes(db, principal, payload, host_cluster)


@router.get("/tenants/{tenant}/nodes", response_model=Page[TenantNodeOut])
def tenant_nodes(tenant: str, db: DbSession, principal: CurrentPrincipal,
                 paging: Paging) -> Page[TenantNodeOut]:
    return service.tenant_nodes(db, principal, tenant, paging)
