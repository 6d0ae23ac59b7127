"""Cluster templates: read by everyone; validated, offered and retired by platform admins."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from app.portalctl.client import USAGE, Client
from app.portalctl.common import GpuClassOpt, Output, api, command_group, fail, resolve_gpu_class
from app.portalctl.output import Format, emit
from app.templates.addon_lines import FIELDS, parse_line, parse_setting

templates_app = command_group("Cluster templates and their versions.")

PATH = "/api/v1/cluster-templates"
TEMPLATE_COLUMNS = ("name", "description", "latest_offered", "versions")
VERSION_COLUMNS = ("version", "state", "placement", "kubernetes_version", "gpu_class",
                   "max_gpus", "validation", "offered_at")
Version = Annotated[int, typer.Argument(help="the version number", min=1)]
Addons = Annotated[list[str] | None, typer.Option(
    "--addon", help="an add-on, 'name repository chart version [setting=value ...]' "
                    "(repeat for more; replaces the add-ons)")]
NoAddons = Annotated[bool, typer.Option("--no-addons", help="a version without add-ons")]
Placement = Annotated[str | None, typer.Option(help="shared-pool or dedicated-nodes")]
K8sVersion = Annotated[str | None, typer.Option(help="MAJOR.MINOR.PATCH the template fixes")]
DefaultGpus = Annotated[int | None, typer.Option(help="GPUs a cluster gets by default")]
MaxGpus = Annotated[int | None, typer.Option(help="the most GPUs a cluster may have")]
PodSecurity = Annotated[str | None, typer.Option(help="restricted or baseline")]
UserNamespaces = Annotated[bool | None, typer.Option(
    "--user-namespaces/--no-user-namespaces", help="pods run with hostUsers: false")]


def _settings(client: Client, placement: str | None, kubernetes_version: str | None,
              gpu_class: str | None, default_gpus: int | None, max_gpus: int | None,
              pod_security: str | None, user_namespaces: bool | None,
              addons: list[str] | None, no_addons: bool) -> dict[str, Any]:
    """The settings given on the command line; those left out are not sent."""
    if addons and no_addons:
        fail("--addon and --no-addons exclude each other", USAGE)
    given: dict[str, Any] = {
        "placement": placement, "kubernetes_version": kubernetes_version,
        "default_gpus": default_gpus, "max_gpus": max_gpus,
        "pod_security": pod_security, "user_namespaces": user_namespaces}
    settings = {k: v for k, v in given.items() if v is not None}
    if gpu_class is not None:
        settings["gpu_class_id"] = resolve_gpu_class(client, gpu_class)["id"]
    if addons:
        settings["addons"] = [_addon(line) for line in addons]
    if no_addons:
        settings["addons"] = []
    return settings


def _addon(line: str) -> dict[str, Any]:
    parsed = parse_line(line)
    if isinstance(parsed, str):
        fail(f"--addon {line!r}: expected '{' '.join(FIELDS)} [setting=value ...]'", USAGE)
    return parsed


@templates_app.command("create")
def templates_create(
    name: str,
    description: Annotated[str, typer.Option(help="one line tenants read")] = "",
    placement: Placement = None, kubernetes_version: K8sVersion = None,
    gpu_class: GpuClassOpt = None, default_gpus: DefaultGpus = None, max_gpus: MaxGpus = None,
    pod_security: PodSecurity = None, user_namespaces: UserNamespaces = None,
    addon: Addons = None, output: Output = Format.table,
) -> None:
    """Create a template; version 1 is a draft to validate and offer (platform admins).

    Example: portalctl templates create training --placement dedicated-nodes
    --gpu-class NVIDIA-H100-80GB-HBM3 --default-gpus 8 --max-gpus 16
    --addon 'kai-scheduler oci://ghcr.io/nvidia/kai-scheduler kai-scheduler v0.9.3
    scheduler.replicas=2'
    """
    with api() as client:
        settings = _settings(client, placement, kubernetes_version, gpu_class, default_gpus,
                             max_gpus, pod_security, user_namespaces, addon, False)
        created = client.request("POST", PATH, create=True, json={
            "name": name, "description": description, "settings": settings})
    emit({**created, "versions": _versions_summary(created["versions"])}
         if output is Format.table else created, output, TEMPLATE_COLUMNS)


@templates_app.command("new-version")
def templates_new_version(
    name: str,
    placement: Placement = None, kubernetes_version: K8sVersion = None,
    gpu_class: GpuClassOpt = None, default_gpus: DefaultGpus = None, max_gpus: MaxGpus = None,
    pod_security: PodSecurity = None, user_namespaces: UserNamespaces = None,
    addon: Addons = None, no_addons: NoAddons = False,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="change one add-on setting of the newest version: "
                      "'addon:key=value', or 'addon:key=' to remove it (repeatable)")] = None,
    output: Output = Format.table,
) -> None:
    """A new draft version: the newest version's settings with the given ones changed.

    Example: portalctl templates new-version training --set kai-scheduler:scheduler.replicas=3
    """
    with api() as client:
        settings = _settings(client, placement, kubernetes_version, gpu_class, default_gpus,
                             max_gpus, pod_security, user_namespaces, addon, no_addons)
        if set_:
            if "addons" in settings:
                fail("--set changes the newest version's add-ons; with --addon, write the "
                     "settings in the --addon line", USAGE)
            versions = client.get(f"{PATH}/{name}")["versions"]
            newest = versions[-1]["addons"] if versions else []
            settings["addons"] = _with_settings(newest, set_)
        created = client.request("POST", f"{PATH}/{name}/versions", json=settings)
    emit(created if output is not Format.table else _version_row(created), output,
         VERSION_COLUMNS)


def _with_settings(addons: list[dict[str, Any]], changes: list[str]) -> list[dict[str, Any]]:
    updated = [{**a, "settings": dict(a.get("settings") or {})} for a in addons]
    by_name = {a["name"]: a for a in updated}
    for change in changes:
        target, _, assignment = change.partition(":")
        if target not in by_name:
            fail(f"--set {change!r}: the newest version has no add-on {target!r}", USAGE)
        key, sep, value = assignment.partition("=")
        if not sep or not key:
            fail(f"--set {change!r}: expected 'addon:key=value'", USAGE)
        if value == "":
            by_name[target]["settings"].pop(key, None)
            continue
        parsed = parse_setting(assignment)
        assert parsed is not None
        by_name[target]["settings"][key] = parsed[1]
    return updated


@templates_app.command("list")
def templates_list(output: Output = Format.table) -> None:
    """List cluster templates (platform admins see drafts and retired versions too).

    Example: portalctl templates list -o json | jq -r '.[] | select(.latest_offered) | .name'
    """
    with api() as client:
        templates = client.get(PATH)
    if output is Format.table:
        templates = [{**t, "versions": _versions_summary(t["versions"])} for t in templates]
    emit(templates, output, TEMPLATE_COLUMNS)


@templates_app.command("show")
def templates_show(name: str, output: Output = Format.table) -> None:
    """Show a template with its versions, their state and validation result.

    Example: portalctl templates show training
    """
    with api() as client:
        template = client.get(f"{PATH}/{name}")
    if output is not Format.table:
        emit(template, output, TEMPLATE_COLUMNS)
        return
    emit({**template, "versions": _versions_summary(template["versions"])}, output,
         TEMPLATE_COLUMNS)
    typer.echo("")
    emit([_version_row(v) for v in template["versions"]], output, VERSION_COLUMNS)


@templates_app.command("validate")
def templates_validate(
    name: str, version: Version,
    wait: Annotated[bool, typer.Option(help="wait for the worker's result (--no-wait: only "
                                            "queue it)")] = True,
    timeout: Annotated[float, typer.Option(help="seconds --wait waits")] = 300.0,
    poll: Annotated[float, typer.Option(help="seconds between checks", hidden=True)] = 1.0,
    output: Output = Format.table,
) -> None:
    """Queue every check on a version; the portal's worker runs them and stores the result
    (platform admins). Exits 1 if --wait gives up while it is still pending.

    Example: portalctl templates validate training 2
    """
    with api() as client:
        queued = client.request("POST", f"{PATH}/{name}/versions/{version}/validate")
        deadline = time.monotonic() + timeout
        while wait and queued["validation_pending"] and time.monotonic() < deadline:
            time.sleep(poll)
            queued = next(v for v in client.get(f"{PATH}/{name}")["versions"]
                          if v["version"] == version)
    _show_version(queued, output)
    if wait and queued["validation_pending"]:
        typer.echo(f"error: the validation is still pending after {timeout:.0f}s; is the "
                   "portal's worker running?", err=True)
        raise typer.Exit(1)


@templates_app.command("offer")
def templates_offer(name: str, version: Version, output: Output = Format.table) -> None:
    """Offer a validated version to tenants (platform admins).

    Example: portalctl templates offer training 2
    """
    _version_action(name, version, "offer", output)


@templates_app.command("retire")
def templates_retire(name: str, version: Version, output: Output = Format.table) -> None:
    """Retire a version: no new clusters or upgrades to it (platform admins).

    Example: portalctl templates retire training 1
    """
    _version_action(name, version, "retire", output)


def _version_action(name: str, version: int, action: str, output: Format) -> None:
    with api() as client:
        changed = client.request("POST", f"{PATH}/{name}/versions/{version}/{action}")
    _show_version(changed, output)


def _show_version(changed: dict[str, Any], output: Format) -> None:
    if output is not Format.table:
        emit(changed, output, VERSION_COLUMNS)
        return
    emit(_version_row(changed), output, VERSION_COLUMNS)
    _print_failed_checks(changed)


def _versions_summary(versions: list[dict[str, Any]]) -> str:
    return ", ".join(f"v{v['version']} {v['state']}" for v in versions) or "-"


def _version_row(version: dict[str, Any]) -> dict[str, Any]:
    return {**version, "validation": validation_summary(version.get("validation"),
                                                        bool(version.get("validation_pending")))}


def validation_summary(validation: dict[str, Any] | None, pending: bool = False) -> str:
    if pending:
        return "pending"
    if validation is None:
        return "not run"
    if validation["passed"]:
        return "passed"
    failed = [c["name"] for c in validation["checks"] if not c["passed"]]
    return f"failed: {', '.join(failed)}" if failed else "failed"


def _print_failed_checks(version: dict[str, Any]) -> None:
    validation = version.get("validation") or {}
    for check in validation.get("checks", []):
        if not check["passed"]:
            for reason in check["reasons"]:
                typer.echo(f"  {check['name']}: {reason}")
    if validation.get("note"):
        typer.echo(f"  note: {validation['note']}")
