"""What every portalctl command shares: the chosen profile, its client, options, failing."""

from __future__ import annotations

import os
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
TENANT_ENV = "PORTALCTL_TENANT"
TenantOpt = Annotated[str | None, typer.Option(
    "--tenant", "-t", envvar=TENANT_ENV,
    help="tenant slug; default: your only tenant")]
TenantArg = Annotated[str | None, typer.Argument(
    metavar="TENANT", show_default=False,
    help="tenant slug, as --tenant; default: your only tenant")]
GPU_CLASS_HELP = ("its id, or a part of its product or display name in any case, e.g. h100 "
                  "(see gpu-classes list)")
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


def either_tenant(positional: str | None, option: str | None) -> str | None:
    """The tenant typed as a positional argument (``clusters list acme``, as kubectl and gcloud
    take what a command acts on) or with --tenant; both typed and different is a usage error.
    PORTALCTL_TENANT gives way to a positional tenant."""
    if positional and option and option not in (positional, os.environ.get(TENANT_ENV)):
        fail(f"two tenants given: {positional!r} and --tenant {option!r}; give one", USAGE)
    return positional or option


def tenant_of(client: Client, tenant: str | None) -> str:
    if tenant:
        return tenant
    memberships = client.get("/api/v1/me")["memberships"]
    if len(memberships) == 1:
        return str(memberships[0]["tenant"])
    fail("choose a tenant with --tenant (or PORTALCTL_TENANT)", USAGE)


def resolve_gpu_class(client: Client, given: str) -> dict[str, Any]:
    """The GPU class ``given`` names: by id, product or display name (any case), else the one
    class whose product or display name contains it (``h100``); an unknown or ambiguous name
    ends the command listing the choices."""
    classes = list(client.items("/api/v1/gpu-classes"))
    wanted = given.strip().casefold()
    matches = [c for c in classes if wanted in {str(c["id"]), *_names_of(c)}]
    if not matches and wanted and not wanted.isdigit():  # a number is an id, never a part
        matches = [c for c in classes if any(wanted in name for name in _names_of(c))]
    if len(matches) == 1:
        return matches[0]
    if matches:
        fail(f"GPU class {given!r} is ambiguous: it names {_listed(matches)}; "
             "give the id or more of the name", USAGE)
    if not classes:
        fail(f"no GPU class {given!r}: the portal has no GPU classes yet", USAGE)
    fail(f"no GPU class {given!r}; choose one of {_listed(classes)}", USAGE)


def _names_of(gpu: dict[str, Any]) -> set[str]:
    return {str(gpu["product"]).casefold(), str(gpu["display_name"]).casefold()}


def _listed(classes: list[dict[str, Any]]) -> str:
    return ", ".join(f"{c['id']} {c['product']} ({c['display_name']})" for c in classes)
