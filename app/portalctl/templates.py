"""Cluster templates: read by everyone; validated, offered and retired by platform admins."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from app.portalctl.common import Output, api
from app.portalctl.output import Format, emit

templates_app = typer.Typer(help="Cluster templates and their versions.", no_args_is_help=True)

PATH = "/api/v1/cluster-templates"
TEMPLATE_COLUMNS = ("name", "description", "latest_offered", "versions")
VERSION_COLUMNS = ("version", "state", "placement", "kubernetes_version", "gpu_class",
                   "max_gpus", "validation", "offered_at")
Version = Annotated[int, typer.Argument(help="the version number", min=1)]


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
def templates_validate(name: str, version: Version, output: Output = Format.table) -> None:
    """Run every check on a version and store the result (platform admins).

    Example: portalctl templates validate training 2
    """
    _version_action(name, version, "validate", output)


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
    if output is not Format.table:
        emit(changed, output, VERSION_COLUMNS)
        return
    emit(_version_row(changed), output, VERSION_COLUMNS)
    _print_failed_checks(changed)


def _versions_summary(versions: list[dict[str, Any]]) -> str:
    return ", ".join(f"v{v['version']} {v['state']}" for v in versions) or "-"


def _version_row(version: dict[str, Any]) -> dict[str, Any]:
    return {**version, "validation": validation_summary(version.get("validation"))}


def validation_summary(validation: dict[str, Any] | None) -> str:
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
