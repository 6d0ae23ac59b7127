"""A tenant's virtual clusters: list, show, create (and wait), resize, upgrade, sleep and wake,
the sleep policy, delete."""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any

import typer

from app.portalctl.client import USAGE, ApiError, Client
from app.portalctl.common import (
    GpuClassOpt,
    Limit,
    Output,
    TenantArg,
    TenantOpt,
    api,
    command_group,
    either_tenant,
    fail,
    resolve_gpu_class,
    tenant_of,
)
from app.portalctl.grants import UNIT_COLUMNS, GpuShare, MigProfile, Slices, grant_fields
from app.portalctl.output import Format, emit

clusters_app = command_group("A tenant's virtual clusters.")

CLUSTER_COLUMNS = ("name", "phase", "region", "host_cluster", "placement", "gpu_class", "gpus",
                   "cpu_millicores", "memory_mib", "kubernetes_version", *UNIT_COLUMNS)


def clusters_path(client: Client, tenant: str | None) -> str:
    return f"/api/v1/tenants/{tenant_of(client, tenant)}/clusters"


@clusters_app.command("list")
def clusters_list(slug: TenantArg = None, tenant: TenantOpt = None,
                  output: Output = Format.table, limit: Limit = None) -> None:
    """List the tenant's clusters.

    Example: portalctl clusters list acme -o json | jq -r '.[] | select(.ready) | .name'
    """
    with api() as client:
        path = clusters_path(client, either_tenant(slug, tenant))
        emit(list(client.items(path, limit)), output, CLUSTER_COLUMNS)


@clusters_app.command("show")
def clusters_show(name: str, tenant: TenantOpt = None, output: Output = Format.table) -> None:
    """Show a cluster with its conditions.

    Example: portalctl clusters show train
    """
    with api() as client:
        path = f"{clusters_path(client, tenant)}/{name}"
        cluster = client.get(path)
        utilisation = _utilisation_of(client, path)
    if output is not Format.table:
        emit({**cluster, "utilisation": utilisation}, output, ())
        return
    emit({**cluster, "waiting_for_gpus": _gpu_wait(cluster.get("waiting_for_gpus")),
          "gpus_in_use": _gpus_in_use(cluster.get("gpus_in_use")),
          "utilisation": _utilisation(utilisation)}, output,
         (*CLUSTER_COLUMNS, "endpoint", "generation", "observed_generation",
          "placement_reason", "waiting_for_gpus", "gpus_in_use", "utilisation"))
    typer.echo("")
    emit(cluster["conditions"], output, ("type", "status", "reason", "message"))
    if cluster.get("placement") == "private-nodes":
        typer.echo("")
        emit(cluster.get("private_nodes") or [], output,
             ("machine", "gpus", "phase", "node", "leaving"))


def _utilisation_of(client: Client, cluster_path: str) -> dict[str, Any]:
    """The cluster's GPU utilisation; a portal that cannot say makes it unknown, not a failure."""
    try:
        answer: dict[str, Any] = client.get(f"{cluster_path}/utilisation")
    except ApiError as error:
        return {"known": False, "reason": error.message}
    return answer


def _utilisation(shown: dict[str, Any]) -> str:
    if not shown.get("known"):
        return f"unknown ({shown.get('reason') or 'no answer'})"
    if not shown.get("gpus_bound"):
        return "no GPU bound"
    return (f"{shown['utilisation_percent']:.0f}% (mean of {shown['gpus_bound']} GPUs bound), "
            f"{shown['gpus_idle']} idle past {shown['idle_window_minutes']} minutes")


def _gpu_wait(wait: dict[str, Any] | None) -> str:
    return str(wait["message"]) if wait else "not looked at yet"


def _gpus_in_use(in_use: dict[str, Any] | None) -> str:
    if not in_use:
        return "not read yet"
    said = f"{in_use['guaranteed']:g} guaranteed"
    if in_use["reclaimable"]:
        return f"{said}, {in_use['burst']:g} burst (reclaimable by KAI)"
    return f"{said}, no burst"


@clusters_app.command("create")
def clusters_create(
    name: str,
    gpu_class: GpuClassOpt = None,
    gpus: Annotated[int, typer.Option(help="whole GPUs from the tenant's quota")] = 0,
    slices: Slices = None, mig_profile: MigProfile = None, gpu_share: GpuShare = None,
    cpu_millicores: Annotated[int, typer.Option(help="CPU, in millicores")] = 4000,
    memory_mib: Annotated[int, typer.Option(help="memory, in MiB")] = 16384,
    placement: Annotated[str | None, typer.Option(
        help="shared-pool or dedicated-nodes (default: shared-pool)")] = None,
    region: Annotated[str | None, typer.Option(
        help="region to run in (default: the portal chooses where the quota has room)")] = None,
    kubernetes_version: Annotated[str | None, typer.Option(help="default: the portal's first")
                                  ] = None,
    template: Annotated[str | None, typer.Option(
        help="an offered cluster template (default: 'default'); leave out what it fixes")
    ] = None,
    template_version: Annotated[int | None, typer.Option(
        help="an offered version of --template (default: its newest offered)", min=1)
    ] = None,
    wait: Annotated[bool, typer.Option(help="follow the conditions until Ready or Failed")
                    ] = False,
    timeout: Annotated[float, typer.Option(help="seconds --wait waits before giving up")
                       ] = 900.0,
    poll: Annotated[float, typer.Option(help="seconds between checks with --wait", hidden=True)
                    ] = 2.0,
    idempotency_key: Annotated[str | None, typer.Option(
        help="reuse a key to retry a create safely (default: a fresh uuid4)")] = None,
    tenant: TenantOpt = None, output: Output = Format.table,
) -> None:
    """Create a virtual cluster; with --wait, exit 0 when Ready, 1 when Failed or timed out.

    Example: portalctl clusters create train --gpu-class NVIDIA-H100-80GB-HBM3 --gpus 4 --wait

    Example: portalctl clusters create train --template training --template-version 2 --gpus 8

    Example: portalctl clusters create notebooks --gpu-class a100 --slices 2 --mig-profile 1g.10gb
    """
    if template_version is not None and template is None:
        fail("--template-version goes with --template", USAGE)
    body: dict[str, Any] = {"name": name, "gpus": gpus, "cpu_millicores": cpu_millicores,
                            "memory_mib": memory_mib}
    optional = {"placement": placement, "region": region,
                "kubernetes_version": kubernetes_version, "template": template,
                "template_version": template_version}
    body.update({k: v for k, v in optional.items() if v is not None})
    body.update(grant_fields(None, slices, mig_profile, gpu_share))
    with api() as client:
        if gpu_class is not None:
            body["gpu_class_id"] = resolve_gpu_class(client, gpu_class)["id"]
        path = clusters_path(client, tenant)
        created = client.request("POST", path, json=body, create=True,
                                 idempotency_key=idempotency_key)
        if not wait:
            emit(created, output, CLUSTER_COLUMNS)
            return
        final = wait_for(lambda: client.get(f"{path}/{name}"), timeout, poll)
    emit(final, output, CLUSTER_COLUMNS)
    if final["phase"] != "Ready":
        raise typer.Exit(1)


def wait_for(fetch: Callable[[], dict[str, Any]], timeout: float,
             poll: float) -> dict[str, Any]:
    """Polls until Ready or Failed, printing each condition change on stderr."""
    deadline = time.monotonic() + timeout
    seen: dict[str, tuple[str, str]] = {}
    while True:
        cluster = fetch()
        for condition in cluster["conditions"]:
            now = (condition["status"], condition["reason"])
            if seen.get(condition["type"]) != now:
                seen[condition["type"]] = now
                typer.echo(f"  {condition['type']}={condition['status']} "
                           f"{condition['reason']}: {condition['message']}", err=True)
        if cluster["phase"] == "Failed":
            typer.echo(f"error: cluster {cluster['name']} failed", err=True)
            return cluster
        if cluster["phase"] == "Ready":
            return cluster
        if time.monotonic() >= deadline:
            typer.echo(f"error: cluster {cluster['name']} not Ready after {timeout:g}s "
                       f"(phase {cluster['phase']})", err=True)
            return cluster
        time.sleep(poll)


@clusters_app.command("resize")
def clusters_resize(
    name: str,
    gpus: Annotated[int | None, typer.Option(help="whole GPUs")] = None,
    slices: Annotated[int | None, typer.Option(help="of a cluster of MIG slices")] = None,
    gpu_share: Annotated[str | None, typer.Option(help="of a cluster of a share, e.g. 0.5")
                         ] = None,
    cpu_millicores: Annotated[int | None, typer.Option(help="CPU, in millicores")] = None,
    memory_mib: Annotated[int | None, typer.Option(help="memory, in MiB")] = None,
    tenant: TenantOpt = None, output: Output = Format.table,
) -> None:
    """Change a cluster's sizes; those left out keep their value. A cluster of MIG slices or
    of a share keeps its unit: --slices or --gpu-share.

    Example: portalctl clusters resize train --gpus 8

    Example: portalctl clusters resize notebooks --slices 3
    """
    body = {k: v for k, v in {"cpu_millicores": cpu_millicores, "memory_mib": memory_mib,
                              **grant_fields(gpus, slices, None, gpu_share)}.items()
            if v is not None}
    if not body:
        fail("give at least one of --gpus, --slices, --gpu-share, --cpu-millicores, "
             "--memory-mib", USAGE)
    with api() as client:
        resized = client.request("PATCH", f"{clusters_path(client, tenant)}/{name}", json=body)
    emit(resized, output, CLUSTER_COLUMNS)


@clusters_app.command("upgrade-template")
def clusters_upgrade_template(
    name: str,
    version: Annotated[int | None, typer.Option(
        help="an offered version of the cluster's template (default: the newest offered)",
        min=1)] = None,
    tenant: TenantOpt = None, output: Output = Format.table,
) -> None:
    """Move a cluster to a newer offered version of its template; the portal applies it.

    Example: portalctl clusters upgrade-template train --version 3
    """
    with api() as client:
        upgraded = client.request(
            "POST", f"{clusters_path(client, tenant)}/{name}/template-upgrade",
            json={"version": version})
    emit(upgraded, output, (*CLUSTER_COLUMNS, "template_version_id"))


POLICY_FIELDS = ("never_sleep", "sleep_after_idle_minutes", "idle_measure", "sleep_schedule",
                 "sleep_timezone", "delete_after_sleep_days")
POLICY_COLUMNS = (*POLICY_FIELDS, "deletion_warned_at", "deletes_at")


class IdleOn(StrEnum):
    bound = "bound"
    utilisation = "utilisation"


@clusters_app.command("sleep-policy")
def clusters_sleep_policy(
    name: str,
    idle_minutes: Annotated[int | None, typer.Option(
        help="sleep after this many minutes without a GPU pod bound (5 to 10080; 0: never)",
        min=0)] = None,
    idle_on: Annotated[IdleOn | None, typer.Option(
        help="what idle means for those minutes: bound (no GPU pod bound) or utilisation "
             "(also every GPU below the operator's idle threshold, read from Prometheus)")
    ] = None,
    schedule: Annotated[str | None, typer.Option(
        help='asleep in these hours, e.g. "weekdays 20:00-08:00, weekends" ("": none)')
    ] = None,
    timezone: Annotated[str | None, typer.Option(
        help="the schedule's IANA time zone, e.g. Europe/Berlin")] = None,
    delete_after_days: Annotated[int | None, typer.Option(
        help="delete after this many days asleep, announced before (1 to 365; 0: never)",
        min=0)] = None,
    never_sleep: Annotated[bool | None, typer.Option(
        "--never-sleep/--may-sleep", help="turn the whole policy off, or on again")] = None,
    tenant: TenantOpt = None, output: Output = Format.table,
) -> None:
    """Show a cluster's sleep policy, or change it: what is left out keeps its value.

    Example: portalctl clusters sleep-policy train --idle-minutes 60 --idle-on utilisation
    --schedule "weekdays 20:00-08:00, weekends" --timezone Europe/Berlin --delete-after-days 30
    """
    changes = {"sleep_after_idle_minutes": idle_minutes,
               "idle_measure": idle_on.value if idle_on else None, "sleep_schedule": schedule,
               "sleep_timezone": timezone, "delete_after_sleep_days": delete_after_days,
               "never_sleep": never_sleep}
    given = {k: v for k, v in changes.items() if v is not None}
    with api() as client:
        path = f"{clusters_path(client, tenant)}/{name}"
        policy = client.get(path)["sleep_policy"]
        if given:
            body = {k: policy[k] for k in POLICY_FIELDS} | {
                k: None if v in (0, "") and k != "never_sleep" else v for k, v in given.items()}
            policy = client.request("PUT", f"{path}/sleep-policy", json=body)["sleep_policy"]
    emit(policy, output, POLICY_COLUMNS)


@clusters_app.command("delete")
def clusters_delete(
    name: str,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")
                   ] = False,
    tenant: TenantOpt = None,
) -> None:
    """Delete a cluster (its kubeconfigs are revoked first, by the portal's worker).

    Example: portalctl clusters delete train --yes
    """
    if not yes and not typer.confirm(f"Delete cluster {name}?"):
        raise typer.Exit(1)
    with api() as client:
        client.request("DELETE", f"{clusters_path(client, tenant)}/{name}")
    typer.echo(f"Cluster {name} is being deleted.")


@clusters_app.command("sleep")
def clusters_sleep(name: str, tenant: TenantOpt = None,
                   output: Output = Format.table) -> None:
    """Put a cluster to sleep (tenant admins): its pods leave the host and its GPUs go back
    to the pool; its objects and kubeconfigs are kept.

    Example: portalctl clusters sleep train
    """
    with api() as client:
        asleep = client.request("POST", f"{clusters_path(client, tenant)}/{name}/sleep")
    emit(asleep, output, CLUSTER_COLUMNS)


@clusters_app.command("wake")
def clusters_wake(
    name: str,
    wait: Annotated[bool, typer.Option(help="follow the conditions until Ready or Failed")
                    ] = False,
    timeout: Annotated[float, typer.Option(help="seconds --wait waits before giving up")
                       ] = 600.0,
    poll: Annotated[float, typer.Option(help="seconds between checks with --wait", hidden=True)
                    ] = 2.0,
    tenant: TenantOpt = None, output: Output = Format.table,
) -> None:
    """Wake a sleeping cluster; with --wait, exit 0 once it answers (Ready).

    Example: portalctl clusters wake train --wait
    """
    with api() as client:
        path = f"{clusters_path(client, tenant)}/{name}"
        woken = client.request("POST", f"{path}/wake")
        if wait:
            woken = wait_for(lambda: client.get(path), timeout, poll)
    emit(woken, output, CLUSTER_COLUMNS)
    if wait and woken["phase"] != "Ready":
        raise typer.Exit(1)
