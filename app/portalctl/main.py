"""portalctl's commands. Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 forbidden."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from app.portalctl import browser_login, profiles
from app.portalctl import kubeconfig as kubeconfigs
from app.portalctl.access import grants_app, members_app, tokens_app
from app.portalctl.audit import audit
from app.portalctl.client import ERROR, USAGE, ApiError, Client
from app.portalctl.clusters import clusters_app, clusters_path, wait_for
from app.portalctl.common import (
    Limit,
    Output,
    RequiredGpuClass,
    TenantArg,
    TenantOpt,
    api,
    command_group,
    either_tenant,
    fail,
    resolve_gpu_class,
    state,
    tenant_of,
)
from app.portalctl.fleet import fleet, gpu_classes_app, nodes_app
from app.portalctl.grants import (
    UNIT_COLUMNS,
    Gpus,
    GpuShare,
    MigProfile,
    Slices,
    grant_fields,
)
from app.portalctl.hosts import hosts_app
from app.portalctl.machines import machines_app
from app.portalctl.notifications import notifications_app
from app.portalctl.output import Format, emit
from app.portalctl.templates import templates_app
from app.portalctl.usage import usage
from app.portalctl.webhooks import webhooks_app

EXIT_CODES = "Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 forbidden or not signed in."
app = typer.Typer(help=f"The GPU Tenant Portal from a terminal.\n\n{EXIT_CODES}",
                  no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None)
tenants_app = command_group("Tenants you belong to (all of them for platform admins).")
quota_app = command_group("A tenant's GPU quota and quota requests.")
app.add_typer(tenants_app, name="tenants")
app.add_typer(quota_app, name="quota")
app.add_typer(clusters_app, name="clusters")
app.add_typer(members_app, name="members")
app.add_typer(grants_app, name="grants")
app.add_typer(tokens_app, name="tokens")
app.add_typer(nodes_app, name="nodes")
app.add_typer(gpu_classes_app, name="gpu-classes")
app.command("fleet")(fleet)
app.add_typer(templates_app, name="templates")
app.add_typer(hosts_app, name="hosts")
app.add_typer(machines_app, name="machines")
app.add_typer(notifications_app, name="notifications")
app.add_typer(webhooks_app, name="webhooks")
app.command("audit")(audit)
app.command("usage")(usage)


@app.callback()
def main(profile: Annotated[str | None, typer.Option(
        envvar="PORTALCTL_PROFILE", help="the profile to use (default: 'default')")] = None,
         ) -> None:
    state.profile = profile
    # httpx notes every request at INFO; a user sees only the outcome (and the problem detail).
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


# ----- sign in and out


@app.command()
def login(
    url: Annotated[str, typer.Option(help="the portal's base URL")],
    token_stdin: Annotated[bool, typer.Option(
        "--token-stdin", help="read an API token (made on the portal's Tokens page) from stdin")
    ] = False,
    no_browser: Annotated[bool, typer.Option(
        "--no-browser", help="print the sign-in link instead of opening a browser")] = False,
    name: Annotated[str | None, typer.Option(
        help="the new API token's name (default: 'portalctl on HOST')")] = None,
    days: Annotated[int, typer.Option(help="the new API token's lifetime in days",
                                      min=1, max=365)] = 30,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the browser")] = 300.0,
) -> None:
    """Sign in to a portal and save the profile (0600, in the user's config directory).

    By default through the browser: the portal shows the API token it will make for this
    command line, and once you confirm it hands the token to portalctl on 127.0.0.1.
    Headless, paste a token made on the portal's API tokens page with --token-stdin; without
    it, a standard input that is not a terminal stops the command at once.

    Example: portalctl login --url https://portal.example.com

    Example: echo "$TOKEN" | portalctl login --url https://portal.example.com --token-stdin
    """
    if not token_stdin and not sys.stdin.isatty():
        fail("standard input is not a terminal: to sign in with a token piped in, add "
             "--token-stdin (echo \"$TOKEN\" | portalctl login --url URL --token-stdin); "
             "to sign in through a browser, run portalctl login in a terminal", USAGE)
    if token_stdin:
        token = sys.stdin.readline().strip()
        if not token:
            fail("no token on stdin", USAGE)
    else:
        token = _browser_token(url, name or browser_login.default_token_name(), days,
                               open_it=not no_browser, timeout=timeout)
    client = Client(url, token)
    try:
        me = client.get("/api/v1/me")
    except ApiError as error:
        fail(error.message, error.exit_code)
    finally:
        client.close()
    profile = profiles.chosen(state.profile)
    path = profiles.save(profiles.Profile(name=profile, url=url, token=token))
    typer.echo(f"Signed in to {url} as {me['email']} (profile {profile!r}, saved in {path}).")


def _browser_token(url: str, name: str, days: int, *, open_it: bool, timeout: float) -> str:
    with browser_login.Listener() as listener:
        link = browser_login.login_url(url, listener.port, listener.state, name, days)
        if open_it and browser_login.can_open_browser() and browser_login.open_browser(link):
            typer.echo("Your browser has been opened to sign in. If it did not open, visit:",
                       err=True)
        else:
            typer.echo("Open this link in a browser to sign in:", err=True)
        typer.echo(f"  {link}", err=True)
        typer.echo(f"Waiting up to {timeout:g}s for the browser...", err=True)
        try:
            return listener.wait(timeout)
        except browser_login.LoginFailed as error:
            fail(str(error), ERROR)


@app.command()
def logout() -> None:
    """Revoke this profile's API token and forget the profile.

    Example: portalctl --profile staging logout
    """
    name = profiles.chosen(state.profile)
    with api() as client:
        client.request("DELETE", "/api/v1/tokens/current")
    profiles.remove(name)
    typer.echo(f"Signed out: the token of profile {name!r} is revoked.")


@app.command()
def whoami(output: Output = Format.table) -> None:
    """Who the profile's token acts as, and in which tenants.

    Example: portalctl whoami -o json
    """
    with api() as client:
        me = client.get("/api/v1/me")
    if output is Format.table:
        tenants = ", ".join(f"{m['tenant']} ({m['role']})" for m in me["memberships"])
        me = {**me, "memberships": tenants or "-"}
    emit(me, output, ("email", "name", "platform_admin", "memberships"))


# ----- tenants

TENANT_COLUMNS = ("slug", "display_name", "state", "role")


@tenants_app.command("list")
def tenants_list(output: Output = Format.table, limit: Limit = None) -> None:
    """List tenants.

    Example: portalctl tenants list -o json | jq -r '.[].slug'
    """
    with api() as client:
        emit(list(client.items("/api/v1/tenants", limit)), output, TENANT_COLUMNS)


@tenants_app.command("show")
def tenants_show(tenant: str, output: Output = Format.table) -> None:
    """Show one tenant.

    Example: portalctl tenants show acme
    """
    with api() as client:
        emit(client.get(f"/api/v1/tenants/{tenant}"), output, (*TENANT_COLUMNS, "created_at"))


# ----- quota

QUOTA_COLUMNS = ("gpu_class_id", "gpu_class", "region", "approved_gpus", "dedicated_gpus",
                 "shared_pool_allocated_gpus", "shared_pool_left_gpus",
                 "dedicated_allocated_gpus", "dedicated_left_gpus", "over_quota_gpus",
                 "allocated_gpus", "in_use_gpus", "burst_in_use_gpus", "cpu_millicores",
                 "memory_mib", *UNIT_COLUMNS)
REQUEST_COLUMNS = ("id", "tenant", "gpu_class", "region", "gpus", "state", "requested_by",
                   "created_at", *UNIT_COLUMNS)


@quota_app.command("show")
def quota_show(slug: TenantArg = None, tenant: TenantOpt = None,
               output: Output = Format.table) -> None:
    """Show the tenant's approved quota per GPU class and region: its dedicated GPUs (part of
    it), what its shared-pool and dedicated-nodes clusters hold and have left.

    Example: portalctl quota show acme
    """
    with api() as client:
        slug = tenant_of(client, either_tenant(slug, tenant))
        emit(list(client.items(f"/api/v1/tenants/{slug}/quota")), output, QUOTA_COLUMNS)


@quota_app.command("requests")
def quota_requests(slug: TenantArg = None, tenant: TenantOpt = None,
                   output: Output = Format.table, limit: Limit = None) -> None:
    """List the tenant's quota requests, newest first. A platform admin naming no tenant gets
    the queue: every tenant's pending requests, the one waiting longest first.

    Example: portalctl quota requests acme -o yaml

    Example (platform admins): portalctl quota requests
    """
    chosen = either_tenant(slug, tenant)
    with api() as client:
        if chosen is None and client.get("/api/v1/me")["platform_admin"]:
            rows = list(client.items("/api/v1/quota-requests", limit, state="pending"))
        else:
            path = f"/api/v1/tenants/{tenant_of(client, chosen)}/quota-requests"
            rows = list(client.items(path, limit))
        emit(rows, output, REQUEST_COLUMNS)


@quota_app.command("request")
def quota_request(
    gpu_class: RequiredGpuClass,
    reason: Annotated[str, typer.Option(help="why the tenant needs them")],
    gpus: Gpus = None, slices: Slices = None, mig_profile: MigProfile = None,
    gpu_share: GpuShare = None,
    cpu_millicores: Annotated[int, typer.Option(help="CPU, in millicores")] = 0,
    memory_mib: Annotated[int, typer.Option(help="memory, in MiB")] = 0,
    ends_at: Annotated[str | None, typer.Option(help="ISO 8601 end, e.g. 2027-01-01T00:00Z")
                       ] = None,
    region: Annotated[str, typer.Option(
        help="the region of host clusters the quota is for (default: the only region)")] = "",
    tenant: TenantOpt = None, output: Output = Format.table,
) -> None:
    """Ask the platform admins for GPU quota, in one region: whole GPUs, slices of a MIG
    profile, or a share of one GPU.

    Example: portalctl quota request --gpu-class NVIDIA-H100-80GB-HBM3 --gpus 8 --region eu
    --reason "May runs"

    Example: portalctl quota request --gpu-class a100 --slices 3 --mig-profile 1g.10gb
    --reason notebooks

    Example: portalctl quota request --gpu-class h100 --gpu-share 0.5 --reason inference
    """
    body: dict[str, Any] = {"reason": reason, "cpu_millicores": cpu_millicores,
                            "memory_mib": memory_mib, "region": region,
                            **grant_fields(gpus, slices, mig_profile, gpu_share)}
    if ends_at:
        body["ends_at"] = ends_at
    with api() as client:
        body["gpu_class_id"] = resolve_gpu_class(client, gpu_class)["id"]
        slug = tenant_of(client, tenant)
        created = client.request("POST", f"/api/v1/tenants/{slug}/quota-requests", json=body,
                                 create=True)
    emit(created, output, REQUEST_COLUMNS)


@quota_app.command("cancel")
def quota_cancel(request_id: int, tenant: TenantOpt = None,
                 output: Output = Format.table) -> None:
    """Cancel one of the tenant's pending quota requests.

    Example: portalctl quota cancel 42
    """
    with api() as client:
        slug = tenant_of(client, tenant)
        cancelled = client.request(
            "POST", f"/api/v1/tenants/{slug}/quota-requests/{request_id}/cancel")
    emit(cancelled, output, REQUEST_COLUMNS)


@quota_app.command("approve")
def quota_approve(
    request_id: int,
    gpus: Annotated[int | None, typer.Option(help="approve fewer GPUs than asked")] = None,
    slices: Annotated[int | None, typer.Option(help="approve fewer slices than asked")] = None,
    gpu_share: Annotated[str | None, typer.Option(
        help="approve a smaller share than asked, e.g. 0.25")] = None,
    note: Annotated[str, typer.Option(help="a note to the tenant")] = "",
    overcommit: Annotated[bool, typer.Option(
        help="confirm guaranteeing more than the class's free GPUs")] = False,
    output: Output = Format.table,
) -> None:
    """Approve a quota request (platform admins).

    Example: portalctl quota approve 42 --gpus 4 --note "4 now, 4 in June"
    """
    body: dict[str, Any] = {"note": note, "overcommit": overcommit,
                            **grant_fields(gpus, slices, None, gpu_share)}
    with api() as client:
        decided = client.request("POST", f"/api/v1/quota-requests/{request_id}/approve",
                                 json=body)
    emit(decided, output, (*REQUEST_COLUMNS, "approved_gpus", "decided_by"))


@quota_app.command("reject")
def quota_reject(request_id: int,
                 note: Annotated[str, typer.Option(help="why, for the tenant")] = "",
                 output: Output = Format.table) -> None:
    """Reject a quota request (platform admins).

    Example: portalctl quota reject 42 --note "no H100s free until July"
    """
    with api() as client:
        decided = client.request("POST", f"/api/v1/quota-requests/{request_id}/reject",
                                 json={"note": note})
    emit(decided, output, (*REQUEST_COLUMNS, "decided_by"))


BURST_COLUMNS = ("tier", "burst_gpus", "over_quota_weight", "reclaim_min_runtime_s",
                 "preempt_min_runtime_s", "overrides")


@quota_app.command("burst")
def quota_burst(slug: TenantArg = None, tenant: TenantOpt = None,
                output: Output = Format.table) -> None:
    """Show how the tenant may borrow idle GPUs beyond its guarantee (burst_gpus -1: no
    ceiling but the pool); borrowed GPUs are reclaimed when their owners need them.

    Example: portalctl quota burst acme
    """
    with api() as client:
        slug = tenant_of(client, either_tenant(slug, tenant))
        emit(client.get(f"/api/v1/tenants/{slug}/burst-policy"), output, BURST_COLUMNS)


@quota_app.command("set-burst")
def quota_set_burst(
    tenant: str,
    tier: Annotated[str, typer.Option(help="guaranteed, burst or priority-burst")],
    burst_gpus: Annotated[int | None, typer.Option(
        help="GPUs it may borrow, -1 no ceiling (default: the tier's)")] = None,
    weight: Annotated[int | None, typer.Option(
        help="its share of idle GPUs against other borrowers (default: the tier's)")] = None,
    reclaim_after: Annotated[int | None, typer.Option(
        help="seconds a pod keeps borrowed GPUs before they may be reclaimed")] = None,
    preempt_after: Annotated[int | None, typer.Option(
        help="seconds a pod runs before a higher-priority pod may preempt it")] = None,
    output: Output = Format.table,
) -> None:
    """Set a tenant's burst tier and values apart from it (platform admins).

    Example: portalctl quota set-burst acme --tier burst --burst-gpus 8
    """
    body = {"tier": tier, "burst_gpus": burst_gpus, "over_quota_weight": weight,
            "reclaim_min_runtime_s": reclaim_after, "preempt_min_runtime_s": preempt_after}
    with api() as client:
        emit(client.request("PUT", f"/api/v1/tenants/{tenant}/burst-policy", json=body),
             output, BURST_COLUMNS)


# ----- kubeconfigs


def _issue(client: Client, cluster_path: str, body: dict[str, Any],
           wait: float | None) -> httpx.Response:
    """The kubeconfig's answer; a sleeping cluster wakes on asking (202): with ``wait``,
    follow it until Ready and ask again; without, say so and stop."""
    answer = client.send("POST", f"{cluster_path}/kubeconfigs", json=body)
    if answer.status_code != 202:
        return answer
    if wait is None:
        fail(f"{answer.json().get('detail', 'the cluster is waking up')}; "
             "`--wait` waits for it", ERROR)
    final = wait_for(lambda: client.get(cluster_path), wait, 2.0)
    if final["phase"] != "Ready":
        fail(f"cluster {final['name']} did not wake (phase {final['phase']})", ERROR)
    return client.send("POST", f"{cluster_path}/kubeconfigs", json=body)


@app.command("kubeconfig")
def kubeconfig(
    cluster: str,
    role: Annotated[str, typer.Option(help="view, edit (members) or admin (tenant admins)")
                    ] = "view",
    ttl: Annotated[str | None, typer.Option(
        help="credential lifetime, e.g. 1h or 90m (default: the portal's)")] = None,
    file: Annotated[Path | None, typer.Option("--file", "-f", help="write to this file (0600)")
                    ] = None,
    merge: Annotated[bool, typer.Option(
        "--merge", help="add to $KUBECONFIG or ~/.kube/config, other entries untouched")
    ] = False,
    use: Annotated[bool, typer.Option("--use", help="with --merge: switch to the context")
                   ] = False,
    force: Annotated[bool, typer.Option(
        "--force", "--overwrite", help="with --merge: replace entries of the same name that "
                                       "point at another cluster or user")] = False,
    wait: Annotated[bool, typer.Option(
        help="a sleeping cluster wakes on asking: wait until it answers, then issue")] = False,
    timeout: Annotated[float, typer.Option(help="seconds --wait waits before giving up")
                       ] = 600.0,
    tenant: TenantOpt = None,
) -> None:
    """Issue a kubeconfig for a Ready cluster: print it, write it, or merge it.

    Its context is named TENANT-CLUSTER-ROLE, so a view and an admin kubeconfig of one
    cluster merge side by side. --merge refuses, changing nothing, to replace a context,
    user or cluster of the same name that is someone else's (--force replaces them).

    Example: portalctl kubeconfig train --role edit --ttl 8h --merge --use

    A sleeping cluster wakes: portalctl kubeconfig train --wait -f train.yaml
    """
    if file is not None and merge:
        fail("choose one of --file and --merge", USAGE)
    if (use or force) and not merge:
        fail(f"{'--use' if use else '--force'} goes with --merge", USAGE)
    body: dict[str, Any] = {"role": role}
    if ttl is not None:
        try:
            body["lifetime_seconds"] = kubeconfigs.ttl_seconds(ttl)
        except ValueError as error:
            fail(str(error), USAGE)
    with api() as client:
        path = f"{clusters_path(client, tenant)}/{cluster}"
        issued = _issue(client, path, body, timeout if wait else None)
        if merge:
            _merge(client, path, issued, use=use, force=force)
    if file is not None:
        kubeconfigs.write_private(file, issued.text)
        typer.echo(f"Kubeconfig written to {file}.", err=True)
    elif not merge:
        typer.echo(issued.text, nl=False)


def _merge(client: Client, cluster_path: str, issued: httpx.Response, *, use: bool,
           force: bool) -> None:
    """Into the user's kubeconfig; on a conflict the kubeconfig just issued is revoked, so
    no credential is left that nobody holds."""
    target = kubeconfigs.default_path()
    try:
        context = kubeconfigs.merge_into(target, issued.text, use=use, force=force)
    except kubeconfigs.Conflict as conflict:
        listed = "".join(f"\n  {line}" for line in conflict.found)
        fail(f"not merged: {target} already has entries of these names for something else:"
             f"{listed}\nNothing was changed; {_revoke_unused(client, cluster_path, issued)}. "
             "--force replaces them; -f FILE writes a file of its own.", ERROR)
    switched = " and switched to it" if use else ""
    typer.echo(f"Context {context} merged into {target}{switched}.", err=True)


def _revoke_unused(client: Client, cluster_path: str, issued: httpx.Response) -> str:
    grant = issued.headers.get("X-Kubeconfig-Grant", "")
    try:
        client.request("DELETE", f"{cluster_path}/kubeconfigs/{grant}")
    except ApiError as error:
        return f"the kubeconfig just issued (grant {grant}) is not revoked: {error.message}"
    return "the kubeconfig just issued is revoked"


def run() -> None:
    app()
