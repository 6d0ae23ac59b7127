"""Who may do what: a tenant's members, kubeconfig grants and the caller's API tokens."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from app.portalctl.client import NOT_FOUND, USAGE, Client
from app.portalctl.common import (
    Limit,
    Output,
    TenantArg,
    TenantOpt,
    api,
    command_group,
    either_tenant,
    fail,
    tenant_of,
)
from app.portalctl.output import Format, emit

members_app = command_group("A tenant's members and their roles (tenant admins).")
grants_app = command_group("Kubeconfigs issued for a tenant's clusters, and revoking them.")
tokens_app = command_group("Your API tokens (for scripts, CI and portalctl itself).")


class Role(StrEnum):
    admin = "admin"
    member = "member"
    viewer = "viewer"


class Scope(StrEnum):
    read = "read"
    write = "write"
    admin = "admin"


MEMBER_COLUMNS = ("id", "email", "name", "role", "source", "pending")
GRANT_COLUMNS = ("id", "cluster", "user_email", "role", "created_at", "expires_at")
TOKEN_COLUMNS = ("id", "name", "prefix", "scopes", "expires_at", "last_used_at", "revoked_at")


# ----- members


def members_path(client: Client, tenant: str | None) -> str:
    return f"/api/v1/tenants/{tenant_of(client, tenant)}/members"


def member_id(client: Client, path: str, member: str) -> int:
    """A member given by membership id or by email address."""
    if member.isascii() and member.isdigit():
        return int(member)
    found = [int(row["id"]) for row in client.items(path)
             if str(row["email"]).lower() == member.lower()]
    if not found:
        fail(f"no member {member!r} in this tenant", NOT_FOUND)
    return found[0]


@members_app.command("list")
def members_list(slug: TenantArg = None, tenant: TenantOpt = None,
                 output: Output = Format.table, limit: Limit = None) -> None:
    """List the tenant's members.

    Example: portalctl members list acme -o json | jq -r '.[].email'
    """
    with api() as client:
        path = members_path(client, either_tenant(slug, tenant))
        emit(list(client.items(path, limit)), output, MEMBER_COLUMNS)


@members_app.command("add")
def members_add(
    email: str,
    role: Annotated[Role, typer.Option(help="admin, member or viewer")] = Role.member,
    tenant: TenantOpt = None, output: Output = Format.table,
) -> None:
    """Add someone by email (they join when they first sign in).

    Example: portalctl members add bob@example.com --role viewer
    """
    with api() as client:
        added = client.request("POST", members_path(client, tenant), create=True,
                               json={"email": email, "role": role.value})
    emit(added, output, MEMBER_COLUMNS)


@members_app.command("set-role")
def members_set_role(
    member: Annotated[str, typer.Argument(help="email address or membership id")],
    role: Annotated[Role, typer.Argument(help="admin, member or viewer")],
    tenant: TenantOpt = None, output: Output = Format.table,
) -> None:
    """Change a member's role.

    Example: portalctl members set-role bob@example.com admin
    """
    with api() as client:
        path = members_path(client, tenant)
        changed = client.request("PATCH", f"{path}/{member_id(client, path, member)}",
                                 json={"role": role.value})
    emit(changed, output, MEMBER_COLUMNS)


@members_app.command("remove")
def members_remove(
    member: Annotated[str, typer.Argument(help="email address or membership id")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")
                   ] = False,
    tenant: TenantOpt = None,
) -> None:
    """Remove a member from the tenant.

    Example: portalctl members remove bob@example.com --yes
    """
    if not yes and not typer.confirm(f"Remove {member} from the tenant?"):
        raise typer.Exit(1)
    with api() as client:
        path = members_path(client, tenant)
        client.request("DELETE", f"{path}/{member_id(client, path, member)}")
    typer.echo(f"{member} removed.")


# ----- kubeconfig grants


def grants_path(slug: str, cluster: str) -> str:
    return f"/api/v1/tenants/{slug}/clusters/{cluster}/kubeconfigs"


@grants_app.command("list")
def grants_list(
    cluster: Annotated[str | None, typer.Argument(help="default: every cluster of the tenant")
                       ] = None,
    tenant: TenantOpt = None, output: Output = Format.table, limit: Limit = None,
) -> None:
    """List active kubeconfig grants: all of them for tenant admins, your own otherwise.

    Example: portalctl grants list train -o json | jq '.[] | select(.role == "admin")'
    """
    with api() as client:
        slug = tenant_of(client, tenant)
        clusters = [cluster] if cluster else [
            str(c["name"]) for c in client.items(f"/api/v1/tenants/{slug}/clusters")]
        rows: list[dict[str, Any]] = []
        for name in clusters:
            rows.extend(client.items(grants_path(slug, name), limit and limit - len(rows)))
            if limit and len(rows) >= limit:
                break
    emit(rows, output, GRANT_COLUMNS)


@grants_app.command("revoke")
def grants_revoke(
    grant: Annotated[list[str], typer.Argument(
        metavar="[CLUSTER] GRANT_ID", show_default=False,
        help="the grant's id (grants list; ids are global, so no cluster or tenant is needed; "
             "CLUSTER GRANT_ID is still taken)")],
    tenant: Annotated[str | None, typer.Option(
        "--tenant", "-t", hidden=True, help="not needed: grant ids are global")] = None,
) -> None:
    """Revoke a kubeconfig at once: its credential stops working in the cluster.

    Example: portalctl grants revoke 17
    """
    grant_id = _grant_id(grant)
    with api() as client:
        client.request("DELETE", f"/api/v1/kubeconfig-grants/{grant_id}")
    typer.echo(f"Grant {grant_id} revoked.")


def _grant_id(given: list[str]) -> int:
    """The id of ``GRANT_ID`` or of the older ``CLUSTER GRANT_ID``."""
    if len(given) > 2 or not given[-1].isascii() or not given[-1].isdigit():
        fail(f"give one grant id (a number, from grants list), not {' '.join(given)!r}", USAGE)
    return int(given[-1])


# ----- API tokens


@tokens_app.command("list")
def tokens_list(output: Output = Format.table, limit: Limit = None) -> None:
    """List your API tokens, newest first (secrets are never shown again).

    Example: portalctl tokens list -o json | jq -r '.[] | select(.revoked_at == null) | .name'
    """
    with api() as client:
        emit(list(client.items("/api/v1/tokens", limit)), output, TOKEN_COLUMNS)


@tokens_app.command("create")
def tokens_create(
    name: str,
    scope: Annotated[list[Scope] | None, typer.Option(
        help="read, write or admin; repeat for several (default: read)")] = None,
    days: Annotated[int, typer.Option(help="lifetime in days (at most the portal's maximum, "
                                      "90 by default)", min=1, max=365)] = 30,
    output: Output = Format.table,
) -> None:
    """Create an API token; its secret is printed once.

    Example: portalctl tokens create ci --scope read --scope write --days 90 -o json | jq -r .token
    """
    scopes = [s.value for s in scope or [Scope.read]]
    with api() as client:
        created = client.request("POST", "/api/v1/tokens", json={
            "name": name, "scopes": scopes, "expires_in_days": days})
    emit(created, output, (*TOKEN_COLUMNS[:4], "expires_at", "token"))
    if output is Format.table:
        typer.echo("Copy the token now: it is not shown again.", err=True)


@tokens_app.command("revoke")
def tokens_revoke(token_id: int) -> None:
    """Revoke one of your API tokens.

    Example: portalctl tokens revoke 12
    """
    with api() as client:
        client.request("DELETE", f"/api/v1/tokens/{token_id}")
    typer.echo(f"Token {token_id} revoked.")
