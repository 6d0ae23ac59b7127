"""Host clusters (platform admins): register, inspect, cordon, drain, check, delete.

Credentials are read from a file or stdin (``-``), never from the command line, where shell
history and the process list would keep them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from app.portalctl.client import USAGE
from app.portalctl.common import Limit, Output, api, command_group, fail
from app.portalctl.output import Format, emit

hosts_app = command_group("Host clusters: the GPU clusters tenants' clusters run on "
                          "(platform admins).")

PATH = "/api/v1/host-clusters"
COLUMNS = ("name", "region", "state", "health", "credentials", "checked_at")
DETAIL = ("name", "region", "description", "state", "takes_new_clusters", "is_default",
          "credentials", "kube_qps", "kube_burst", "webhook_endpoint", "health", "checked_at")
Source = Annotated[str | None, typer.Option(
    help="a file to read it from, or - for stdin", metavar="FILE|-")]
Reason = Annotated[str, typer.Option(help="why, kept in the audit trail")]
WebhookUrl = Annotated[str | None, typer.Option(
    help="the https:// address at which this host's API server reaches `portal webhook` "
         "(the portal adds /mutate-pods/hosts/<id>); '' removes it", metavar="URL")]


@hosts_app.command("list")
def hosts_list(output: Output = Format.table, limit: Limit = None) -> None:
    """List host clusters with their state and health.

    Example: portalctl hosts list
    """
    with api() as client:
        hosts = list(client.items(PATH, limit))
    emit(hosts if output is not Format.table else [_row(h) for h in hosts], output, COLUMNS)


@hosts_app.command("show")
def hosts_show(name: str, output: Output = Format.table) -> None:
    """Show a host cluster with each health check's result.

    Example: portalctl hosts show gpu-eu-2
    """
    with api() as client:
        host = client.get(f"{PATH}/{name}")
    _emit_detail(host, output)


@hosts_app.command("register")
def hosts_register(
    name: str,
    region: Annotated[str, typer.Option(help="e.g. eu-west")] = "",
    description: Annotated[str, typer.Option()] = "",
    kubeconfig: Source = None,
    server: Annotated[str | None, typer.Option(help="with --token: the API server's URL")
                      ] = None,
    token: Source = None,
    ca: Annotated[str | None, typer.Option(
        "--ca", help="with --token: the API server's CA certificate (PEM file)")] = None,
    qps: Annotated[float | None, typer.Option(help="requests per second to this host")] = None,
    burst: Annotated[int | None, typer.Option(help="burst above --qps")] = None,
    webhook_url: WebhookUrl = None,
    output: Output = Format.table,
) -> None:
    """Register a host cluster with a kubeconfig, or a ServiceAccount token, CA and server.

    Example: portalctl hosts register gpu-eu-2 --region eu-west --kubeconfig gpu-eu-2.yaml
    Example: kubectl create token portal -n portal | portalctl hosts register gpu-eu-2
    --server https://gpu-eu-2.example.com:6443 --ca ca.crt --token -
    """
    body: dict[str, Any] = {"name": name, "region": region, "description": description,
                            "kube_qps": qps, "kube_burst": burst, "webhook_url": webhook_url,
                            "credentials": _credentials(kubeconfig, server, token, ca)}
    with api() as client:
        host = client.request("POST", PATH, json=body, create=True)
    _emit_detail(host, output)


@hosts_app.command("update")
def hosts_update(
    name: str,
    rename: Annotated[str | None, typer.Option(help="a new name")] = None,
    region: Annotated[str | None, typer.Option(help="e.g. eu-west")] = None,
    description: Annotated[str | None, typer.Option()] = None,
    webhook_url: WebhookUrl = None,
    output: Output = Format.table,
) -> None:
    """Change a host's name, region, description or admission webhook URL; options left
    out stay as they are.

    Example: portalctl hosts update gpu-eu-2 --webhook-url https://webhook.gpu-eu-2.example.com:9443
    """
    body = {key: value for key, value in (("name", rename), ("region", region),
                                          ("description", description),
                                          ("webhook_url", webhook_url)) if value is not None}
    if not body:
        fail("nothing to change: give --rename, --region, --description or --webhook-url",
             USAGE)
    with api() as client:
        host = client.request("PATCH", f"{PATH}/{name}", json=body)
    _emit_detail(host, output)


@hosts_app.command("credentials")
def hosts_credentials(
    name: str, kubeconfig: Source = None,
    server: Annotated[str | None, typer.Option(help="with --token: the API server's URL")
                      ] = None,
    token: Source = None,
    ca: Annotated[str | None, typer.Option("--ca", help="with --token: the CA (PEM file)")
                  ] = None,
    output: Output = Format.table,
) -> None:
    """Replace a host's credentials (rotation): the new ones are checked, then sealed.

    Example: portalctl hosts credentials gpu-eu-2 --kubeconfig new.yaml
    """
    body = _credentials(kubeconfig, server, token, ca)
    with api() as client:
        host = client.request("PUT", f"{PATH}/{name}/credentials", json=body)
    _emit_detail(host, output)


@hosts_app.command("cordon")
def hosts_cordon(name: str, reason: Reason = "", output: Output = Format.table) -> None:
    """Cordon a host: it takes no new clusters; its clusters stay.

    Example: portalctl hosts cordon gpu-eu-2 --reason "rack 4 maintenance"
    """
    _state(name, "cordon", reason, output)


@hosts_app.command("uncordon")
def hosts_uncordon(name: str, reason: Reason = "", output: Output = Format.table) -> None:
    """Make a cordoned or draining host take new clusters again.

    Example: portalctl hosts uncordon gpu-eu-2
    """
    _state(name, "uncordon", reason, output)


@hosts_app.command("drain")
def hosts_drain(name: str, reason: Reason = "", output: Output = Format.table) -> None:
    """Cordon a host and mark it for evacuation (moving its clusters is not automated).

    Example: portalctl hosts drain gpu-eu-2 --reason "decommissioning"
    """
    _state(name, "drain", reason, output)


@hosts_app.command("check")
def hosts_check(name: str, output: Output = Format.table) -> None:
    """Run every health check on a host now; exits 1 when one fails.

    Example: portalctl hosts check gpu-eu-2
    """
    with api() as client:
        host = client.request("POST", f"{PATH}/{name}/check")
    _emit_detail(host, output)
    if any(not check["passed"] for check in host["health"]["checks"]):
        raise typer.Exit(1)


@hosts_app.command("delete")
def hosts_delete(name: str) -> None:
    """Delete a host no node or cluster points at.

    Example: portalctl hosts delete gpu-old-1
    """
    with api() as client:
        client.request("DELETE", f"{PATH}/{name}")
    typer.echo(f"host cluster {name} deleted")


def _state(name: str, action: str, reason: str, output: Format) -> None:
    with api() as client:
        host = client.request("POST", f"{PATH}/{name}/{action}", json={"reason": reason})
    _emit_detail(host, output)


STDIN = "-"


def _credentials(kubeconfig: str | None, server: str | None, token: str | None,
                 ca: str | None) -> dict[str, Any]:
    if (kubeconfig is None) == (token is None):
        fail("give either --kubeconfig FILE, or --token FILE with --server and --ca "
             "(- reads stdin)", USAGE)
    if kubeconfig is not None:
        if server is not None or ca is not None:
            fail("--server and --ca go with --token, not --kubeconfig", USAGE)
        return {"kind": "kubeconfig", "kubeconfig": _read(kubeconfig, "--kubeconfig")}
    assert token is not None
    if server is None or ca is None:
        fail("--token needs --server and --ca", USAGE)
    if STDIN == token == ca:
        fail("only one of --token and --ca can come from stdin", USAGE)
    return {"kind": "token", "server": server, "token": _read(token, "--token").strip(),
            "ca_certificate": _read(ca, "--ca")}


def _read(source: str, option: str) -> str:
    if source == STDIN:
        text = sys.stdin.read()
    else:
        path = Path(source)
        if not path.is_file():
            fail(f"{option}: no file {source}", USAGE)
        text = path.read_text()
    if not text.strip():
        fail(f"{option}: empty", USAGE)
    return text


def _health(host: dict[str, Any]) -> str:
    health = host["health"]
    if health["reachable"] is None:
        return "not checked"
    failed = [c["name"] for c in health["checks"] if not c["passed"]]
    if not health["reachable"]:
        return "unreachable"
    return f"failing: {', '.join(failed)}" if failed else "healthy"


def _row(host: dict[str, Any]) -> dict[str, Any]:
    credentials = host["credentials"]
    shown = credentials["kind"] + (f" {credentials['server']}" if credentials["server"] else "")
    return {**host, "health": _health(host), "credentials": shown,
            "checked_at": host["health"]["checked_at"]}


def _emit_detail(host: dict[str, Any], output: Format) -> None:
    if output is not Format.table:
        emit(host, output, DETAIL)
        return
    emit(_row(host), output, DETAIL)
    if host["health"]["checks"]:
        typer.echo("")
        emit([{**c, "passed": c["passed"]} for c in host["health"]["checks"]], output,
             ("name", "passed", "message"))
