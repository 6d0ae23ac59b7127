"""What every portalctl command shares: the chosen profile, its client, options, failing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, NoReturn

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


@dataclass
class State:
    profile: str | None = None


state = State()


def fail(message: str, code: int) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


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
