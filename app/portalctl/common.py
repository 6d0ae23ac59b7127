"""What every portalctl command shares: the chosen profile, its client, options, failing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn

import typer

from app.portalctl import profiles
from app.portalctl.client import FORBIDDEN, USAGE, ApiError, Client
from app.portalctl.output import Format

Output = Annotated[Format, typer.Option("--output", "-o", help="table, json or yaml")]
Limit = Annotated[int | None, typer.Option(help="at most this many items (default: all)",
                                           min=1)]
TenantOpt = Annotated[str | None, typer.Option(
    "--tenant", "-t", envvar="PORTALCTL_TENANT",
    help="tenant slug; default: your only tenant")]
GPU_CLASS_HELP = "its id, product or display name, any case (see gpu-classes list)"
GpuClassOpt = Annotated[str | None, typer.Option("--gpu-class", metavar="CLASS",
                                                 help=f"the GPU class: {GPU_CLASS_HELP}")]
RequiredGpuClass = Annotated[str, typer.Option("--gpu-class", metavar="CLASS",
                                               help=f"the GPU class: {GPU_CLASS_HELP}")]


@dataclass
class State:
    profile: str | None = None


state = State()


def fail(message: str, code: int) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def command_group(help_text: str) -> typer.Typer:
    """A group of commands. Its help takes Click's plain layout: at 80 columns Rich's option
    table cuts long option names short and shows every flag as ``<bool>``."""
    return typer.Typer(help=help_text, no_args_is_help=True, rich_markup_mode=None)


@contextmanager
def api() -> Iterator[Client]:
    """A client for the chosen profile; API errors end the command with their exit code."""
    name = profiles.chosen(state.profile)
    profile = profiles.load(name)
    if profile is None:
        fail(f"not signed in (profile {name!r}): portalctl login --url URL",
             FORBIDDEN)
    client = Client(profile.url, profile.token)
    try:
        yield client
    except ApiError as error:
        fail(error.message, error.exit_code)
    finally:
        client.close()


def tenant_of(client: Client, tenant: str | None) -> str:
    if tenant:
        return tenant
    memberships = client.get("/api/v1/me")["memberships"]
    if len(memberships) == 1:
        return str(memberships[0]["tenant"])
    fail("choose a tenant with --tenant (or PORTALCTL_TENANT)", USAGE)


def resolve_gpu_class(client: Client, given: str) -> dict[str, Any]:
    """The GPU class ``given`` names by id, product or display name (any case), from the
    portal's list; an unknown or ambiguous name ends the command listing the choices."""
    classes = list(client.items("/api/v1/gpu-classes"))
    wanted = given.strip().casefold()
    matches = [c for c in classes if wanted in _names_of(c)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        fail(f"GPU class {given!r} is ambiguous: it names {_listed(matches)}; "
             "give the id or the product", USAGE)
    if not classes:
        fail(f"no GPU class {given!r}: the portal has no GPU classes yet", USAGE)
    fail(f"no GPU class {given!r}; choose one of {_listed(classes)}", USAGE)


def _names_of(gpu: dict[str, Any]) -> set[str]:
    return {str(gpu["id"]), str(gpu["product"]).casefold(), str(gpu["display_name"]).casefold()}


def _listed(classes: list[dict[str, Any]]) -> str:
    return ", ".join(f"{c['id']} {c['product']} ({c['display_name']})" for c in classes)
