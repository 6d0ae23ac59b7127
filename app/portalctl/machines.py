"""Bare-metal GPU machines (platform admins): register by BMC, provision, release, remove.

The BMC password is read from stdin (``--password-stdin``) or asked at a prompt that does not
echo it, never taken from the command line, where shell history and the process list would
keep it.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from app.portalctl.client import USAGE
from app.portalctl.common import (
    Limit,
    Output,
    RequiredGpuClass,
    api,
    command_group,
    fail,
    resolve_gpu_class,
)
from app.portalctl.output import Format, emit

machines_app = command_group("Bare-metal GPU machines: registered by their BMC, provisioned "
                             "through Metal3 into a host cluster's nodes (platform admins).")

PATH = "/api/v1/machines"
COLUMNS = ("name", "host_cluster", "gpus", "rack", "desired", "phase", "node_name")
DETAIL = ("name", "host_cluster", "bmc_address", "bmc_credentials_set_at", "boot_mac", "gpus",
          "rack", "desired", "deleting", "phase", "reason", "provisioning_state", "node_name",
          "tenant")
BmcUser = Annotated[str, typer.Option("--bmc-user", help="the BMC's user name")]
PasswordStdin = Annotated[bool, typer.Option(
    "--password-stdin", help="read the BMC password from the first line of stdin (otherwise "
                             "a prompt asks for it)")]


@machines_app.command("list")
def machines_list(output: Output = Format.table, limit: Limit = None) -> None:
    """List machines with what is asked of them and their phase.

    Example: portalctl machines list
    """
    with api() as client:
        machines = list(client.items(PATH, limit))
    emit(machines if output is not Format.table else [_row(m) for m in machines], output,
         COLUMNS)


@machines_app.command("show")
def machines_show(name: str, output: Output = Format.table) -> None:
    """Show a machine: its phase, Metal3's state and reason, and its node.

    Example: portalctl machines show gpu-r4-07
    """
    with api() as client:
        machine = client.get(f"{PATH}/{name}")
    _emit_detail(machine, output)


@machines_app.command("register")
def machines_register(
    name: str,
    host_cluster: Annotated[str, typer.Option("--host-cluster", help="the host it joins")],
    bmc_address: Annotated[str, typer.Option(
        "--bmc-address", help="with its Metal3 driver, e.g. redfish+https://10.0.4.7/redfish/"
                              "v1/Systems/1 or ipmi://10.0.4.7")],
    bmc_user: BmcUser,
    boot_mac: Annotated[str, typer.Option("--boot-mac", help="the MAC the machine boots from")],
    gpu_class: RequiredGpuClass,
    gpus: Annotated[int, typer.Option(help="GPUs the machine is expected to have", min=0)],
    rack: Annotated[str, typer.Option(help="its rack")] = "",
    password_stdin: PasswordStdin = False,
    output: Output = Format.table,
) -> None:
    """Register a machine by its BMC into the pool of a host cluster.

    Example: echo "$BMC_PASSWORD" | portalctl machines register gpu-r4-07 --host-cluster
    gpu-eu-2 --bmc-address ipmi://10.0.4.7 --bmc-user admin --boot-mac 0c:c4:7a:12:34:56
    --gpu-class H100 --gpus 8 --rack r4 --password-stdin
    """
    password = _password(password_stdin)
    with api() as client:
        product = resolve_gpu_class(client, gpu_class)["product"]
        machine = client.request("POST", PATH, create=True, json={
            "name": name, "host_cluster": host_cluster, "bmc_address": bmc_address,
            "bmc": {"username": bmc_user, "password": password}, "boot_mac": boot_mac,
            "gpu_class": product, "gpu_count": gpus, "rack": rack})
    _emit_detail(machine, output)


@machines_app.command("credentials")
def machines_credentials(name: str, bmc_user: BmcUser, password_stdin: PasswordStdin = False,
                         output: Output = Format.table) -> None:
    """Replace a machine's BMC user and password; the worker rewrites its BMC Secret.

    Example: echo "$BMC_PASSWORD" | portalctl machines credentials gpu-r4-07 --bmc-user root
    --password-stdin
    """
    password = _password(password_stdin)
    with api() as client:
        machine = client.request("PUT", f"{PATH}/{name}/bmc-credentials",
                                 json={"username": bmc_user, "password": password})
    _emit_detail(machine, output)


@machines_app.command("provision")
def machines_provision(name: str, output: Output = Format.table) -> None:
    """Provision a machine: Metal3 images it and it joins its host cluster as a node.

    Example: portalctl machines provision gpu-r4-07
    """
    _act(name, "provision", output)


@machines_app.command("release")
def machines_release(name: str, output: Output = Format.table) -> None:
    """Release a machine: Metal3 deprovisions and cleans it, and it returns to the pool
    (refused while its node is dedicated to a tenant).

    Example: portalctl machines release gpu-r4-07
    """
    _act(name, "release", output)


@machines_app.command("remove")
def machines_remove(name: str) -> None:
    """Remove a machine in the pool: its BareMetalHost and Secrets go, then the machine.

    Example: portalctl machines remove gpu-r4-07
    """
    with api() as client:
        client.request("DELETE", f"{PATH}/{name}")
    typer.echo(f"machine {name} is being removed")


def _act(name: str, action: str, output: Format) -> None:
    with api() as client:
        machine = client.request("POST", f"{PATH}/{name}/{action}")
    _emit_detail(machine, output)


def _password(from_stdin: bool) -> str:
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        password = typer.prompt("BMC password", hide_input=True)
    else:
        fail("give the BMC password on stdin with --password-stdin (or run in a terminal to "
             "be asked for it)", USAGE)
    if not password:
        fail("the BMC password is empty", USAGE)
    return password


def _row(machine: dict[str, Any]) -> dict[str, Any]:
    desired = "deletion" if machine["deleting"] else machine["desired"]
    return {**machine, "gpus": f"{machine['gpu_count']} x {machine['gpu_class']}",
            "desired": desired}


def _emit_detail(machine: dict[str, Any], output: Format) -> None:
    if output is not Format.table:
        emit(machine, output, DETAIL)
        return
    emit(_row(machine), output, DETAIL)
