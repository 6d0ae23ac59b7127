"""The GPU fleet: nodes and their dedication to tenants (platform admins), and GPU classes."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from app.portalctl.client import Client
from app.portalctl.common import (
    GpuClassOpt,
    Limit,
    Output,
    RequiredGpuClass,
    api,
    command_group,
    resolve_gpu_class,
)
from app.portalctl.output import Format, emit

nodes_app = command_group("GPU nodes and dedicating them to tenants (platform admins).")
gpu_classes_app = command_group("GPU classes: the kinds of GPU quota is asked in.")

HostCluster = Annotated[str | None, typer.Option(
    help="the host cluster's name (default: the default one)")]
NODE_COLUMNS = ("name", "gpu_class", "gpus", "zone", "rack", "ready", "tenant")
SUGGESTED_COLUMNS = ("name", "gpus", "zone", "rack", "clique")
GPU_CLASS_COLUMNS = ("id", "product", "display_name", "memory_mib", "gpus_per_node")


HOST_CAPACITY_COLUMNS = ("host_cluster", "region", "state", "gpu_class", "total", "dedicated",
                         "guaranteed", "free", "not_ready", "borrowed",
                         "lent_from_idle_guarantees")
REGION_CAPACITY_COLUMNS = ("region", "gpu_class", "hosts", "total", "dedicated", "guaranteed",
                           "free", "not_ready")


class FleetBy(StrEnum):
    host = "host"
    region = "region"


def fleet(
    by: Annotated[FleetBy, typer.Option(help="one row per host and class, or per region")
                  ] = FleetBy.host,
    region: Annotated[str | None, typer.Option(help="only this region")] = None,
    host_cluster: Annotated[str | None, typer.Option(help="only this host cluster")] = None,
    gpu_class: GpuClassOpt = None,
    output: Output = Format.table,
) -> None:
    """GPU capacity per host (or region) and class: dedicated, guaranteed, free, not ready;
    per host also the burst in use (borrowed) and what of it idle guarantees lent.

    Example: portalctl fleet --by region --gpu-class NVIDIA-H100-80GB-HBM3
    """
    with api() as client:
        found = client.get("/api/v1/fleet/capacity", region=region, host_cluster=host_cluster,
                           gpu_class=_product(client, gpu_class))
    if by is FleetBy.host:
        emit(found["hosts"], output, HOST_CAPACITY_COLUMNS)
    else:
        rows = [{**row, "hosts": ",".join(row["hosts"])} for row in found["regions"]]
        emit(rows, output, REGION_CAPACITY_COLUMNS)


class NodeSort(StrEnum):
    id = "id"
    name = "name"
    rack = "rack"


# ----- nodes


@nodes_app.command("list")
def nodes_list(
    gpu_class: GpuClassOpt = None,
    zone: Annotated[str | None, typer.Option()] = None,
    rack: Annotated[str | None, typer.Option()] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="dedicated to")] = None,
    ready: Annotated[bool | None, typer.Option("--ready/--not-ready",
                                               help="only ready / only not ready nodes")
                     ] = None,
    include_gone: Annotated[bool, typer.Option(help="also nodes gone from the host")] = False,
    sort: Annotated[NodeSort, typer.Option(help="id, name or rack")] = NodeSort.id,
    host_cluster: HostCluster = None, output: Output = Format.table, limit: Limit = None,
) -> None:
    """List GPU nodes, filtered.

    Example: portalctl nodes list --gpu-class NVIDIA-H100-80GB-HBM3 --not-ready
    """
    filters: dict[str, Any] = {
        "zone": zone, "rack": rack, "tenant": tenant,
        "ready": None if ready is None else str(ready).lower(),
        "include_gone": include_gone or None, "sort": sort.value, "host_cluster": host_cluster}
    with api() as client:
        filters["gpu_class"] = _product(client, gpu_class)
        emit(list(client.items("/api/v1/nodes", limit, **filters)), output, NODE_COLUMNS)


@nodes_app.command("show")
def nodes_show(node: str, host_cluster: HostCluster = None,
               output: Output = Format.table) -> None:
    """Show a node with its assignment history.

    Example: portalctl nodes show gpu-node-07 -o yaml
    """
    with api() as client:
        detail = client.get(f"/api/v1/nodes/{node}", host_cluster=host_cluster)
    emit(detail, output, (*NODE_COLUMNS, "mig_strategy", "first_seen_at", "last_seen_at"))
    if output is Format.table and detail["assignments"]:
        typer.echo("")
        emit(detail["assignments"], output, ("tenant", "assigned_at", "assigned_by",
                                             "ended_at", "ended_by"))


@nodes_app.command("suggest")
def nodes_suggest(
    tenant: Annotated[str, typer.Option("--tenant", "-t", help="the tenant to dedicate to")],
    gpu_class: RequiredGpuClass,
    gpus: Annotated[int, typer.Option(help="GPUs wanted (whole nodes are suggested)")],
    host_cluster: HostCluster = None, output: Output = Format.table,
) -> None:
    """Suggest free nodes to dedicate to a tenant; nothing is assigned.

    Example: portalctl nodes suggest --tenant acme --gpu-class NVIDIA-H100-80GB-HBM3 --gpus 16
    """
    with api() as client:
        body = {"tenant": tenant, "gpu_class": _product(client, gpu_class), "gpus": gpus}
        suggestion = client.request("POST", "/api/v1/node-suggestions", json=body,
                                    params=_present(host_cluster=host_cluster))
    emit(suggestion, output, ("tenant", "gpu_class", "gpus_requested", "gpus", "quota_gpus",
                              "dedicated_gpus", "fits_quota", "note"))
    if output is Format.table:
        typer.echo("")
        emit(suggestion["nodes"], output, SUGGESTED_COLUMNS)


@nodes_app.command("assign")
def nodes_assign(
    node: str,
    tenant: Annotated[str, typer.Option("--tenant", "-t", help="the tenant to dedicate to")],
    host_cluster: HostCluster = None, output: Output = Format.table,
) -> None:
    """Dedicate a node to a tenant.

    Example: portalctl nodes assign gpu-node-07 --tenant acme
    """
    with api() as client:
        detail = client.request("PUT", f"/api/v1/nodes/{node}/assignment",
                                json={"tenant": tenant},
                                params=_present(host_cluster=host_cluster))
    emit(detail, output, NODE_COLUMNS)


@nodes_app.command("unassign")
def nodes_unassign(node: str, host_cluster: HostCluster = None) -> None:
    """End a node's dedication: it returns to the shared pool.

    Example: portalctl nodes unassign gpu-node-07
    """
    with api() as client:
        client.request("DELETE", f"/api/v1/nodes/{node}/assignment",
                       params=_present(host_cluster=host_cluster))
    typer.echo(f"Node {node} is back in the shared pool.")


def _product(client: Client, gpu_class: str | None) -> str | None:
    """The product the API filters by, for a class named any way portalctl takes one."""
    return None if gpu_class is None else str(resolve_gpu_class(client, gpu_class)["product"])


def _present(**params: Any) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


# ----- GPU classes


@gpu_classes_app.command("list")
def gpu_classes_list(output: Output = Format.table, limit: Limit = None) -> None:
    """List GPU classes (with the fleet's capacity in -o json/yaml for platform admins).

    Example: portalctl gpu-classes list -o json | jq '.[] | {id, product}'
    """
    with api() as client:
        emit(list(client.items("/api/v1/gpu-classes", limit)), output, GPU_CLASS_COLUMNS)
