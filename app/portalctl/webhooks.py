"""Webhook endpoints: a tenant's (its admins) or, with --platform, the platform's (platform
admins). The signing secret is printed once, by create and roll-secret."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from app.portalctl.client import USAGE, Client
from app.portalctl.common import Output, TenantOpt, api, command_group, fail, tenant_of
from app.portalctl.output import Format, emit

webhooks_app = command_group("Webhook endpoints: where notifications are posted, signed.")

COLUMNS = ("id", "name", "state", "url", "format", "pending", "dropped", "last_error")
DETAIL = ("id", "name", "url", "format", "kinds", "disabled", "state", "failing_since",
          "last_error", "last_success_at", "pending", "dropped", "created_by",
          "previous_secret_until")
Platform = Annotated[bool, typer.Option(
    "--platform", help="the platform's endpoints (platform admins) instead of a tenant's")]


def _path(client: Client, tenant: str | None, platform: bool) -> str:
    if platform:
        if tenant:
            fail("give --tenant or --platform, not both", USAGE)
        return "/api/v1/admin/webhooks"
    return f"/api/v1/tenants/{tenant_of(client, tenant)}/webhooks"


@webhooks_app.command("list")
def webhooks_list(tenant: TenantOpt = None, platform: Platform = False,
                  output: Output = Format.table) -> None:
    """List webhook endpoints with their state, queue and last error.

    Example: portalctl webhooks list --tenant acme
    """
    with api() as client:
        found = client.get(_path(client, tenant, platform))
    emit(found, output, COLUMNS)


@webhooks_app.command("create")
def webhooks_create(
    name: str,
    url: Annotated[str, typer.Argument(help="https:// address of the receiver")],
    format: Annotated[str, typer.Option(
        "--format", help="cloudevents or slack")] = "cloudevents",
    kind: Annotated[list[str] | None, typer.Option(
        "--kind", help="a kind it receives (repeat it); none: every kind")] = None,
    tenant: TenantOpt = None, platform: Platform = False, output: Output = Format.table,
) -> None:
    """Register a webhook endpoint; prints its signing secret, this once.

    Example: portalctl webhooks create ops https://hooks.example.com/portal --kind cluster.ready
    """
    body: dict[str, Any] = {"name": name, "url": url, "format": format, "kinds": kind or None}
    with api() as client:
        made = client.request("POST", _path(client, tenant, platform), json=body)
    _created(made, output)


@webhooks_app.command("roll-secret")
def webhooks_roll_secret(endpoint_id: int, tenant: TenantOpt = None,
                         platform: Platform = False, output: Output = Format.table) -> None:
    """Make a new signing secret, printed this once; the old one signs too for 24 hours.

    Example: portalctl webhooks roll-secret 3 --tenant acme
    """
    with api() as client:
        rolled = client.request("POST", f"{_path(client, tenant, platform)}/{endpoint_id}"
                                        "/roll-secret")
    if output is not Format.table:
        emit(rolled, output, ())
        return
    typer.echo(f"secret:                {rolled['secret']}")
    typer.echo(f"previous secret until: {rolled['previous_secret_until']}")
    typer.echo("Copy the secret now: it will not be shown again.", err=True)


@webhooks_app.command("test")
def webhooks_test(endpoint_id: int, tenant: TenantOpt = None,
                  platform: Platform = False) -> None:
    """Send a test notification to one endpoint (see `webhooks list` for how it went).

    Example: portalctl webhooks test 3 --tenant acme
    """
    with api() as client:
        sent = client.request("POST", f"{_path(client, tenant, platform)}/{endpoint_id}/test")
    typer.echo(f"test sent: webhook-id {sent['notification_id']}")


@webhooks_app.command("delete")
def webhooks_delete(
    endpoint_id: int,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")
                   ] = False,
    tenant: TenantOpt = None, platform: Platform = False,
) -> None:
    """Delete a webhook endpoint and its undelivered messages.

    Example: portalctl webhooks delete 3 --tenant acme --yes
    """
    if not yes and not typer.confirm(f"Delete webhook endpoint {endpoint_id}?"):
        raise typer.Exit(1)
    with api() as client:
        client.request("DELETE", f"{_path(client, tenant, platform)}/{endpoint_id}")
    typer.echo(f"webhook endpoint {endpoint_id} deleted.")


def _created(made: dict[str, Any], output: Format) -> None:
    if output is not Format.table:
        emit(made, output, ())
        return
    emit(made, output, DETAIL)
    typer.echo(f"{'secret:':<22} {made['secret']}")
    typer.echo("Copy the secret now: it will not be shown again.", err=True)
