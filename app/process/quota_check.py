"""``portal quota check``: the tenants over quota under the one accounting of quota, dedicated
nodes and clusters (docs/operator.md, "Quota accounting"), by how much and where. It reads
only: nothing is changed on an upgrade, the operator and the tenants decide what to shrink."""

from __future__ import annotations

from collections.abc import Callable

import typer
from sqlalchemy.orm import Session

from app.accounting.over_quota import Holding, OverQuota, over_quota
from app.database.core import Database
from app.gpu_classes import service as gpu_classes
from app.kit.config import Settings


def register(cli: typer.Typer, settings_of: Callable[[], Settings]) -> None:
    """``portal quota check`` on the portal's command line."""
    quota_cli = typer.Typer(help="Tenant quota (operator checks)", no_args_is_help=True,
                            add_completion=False, rich_markup_mode=None)

    @quota_cli.command("check")
    def check() -> None:
        """List every tenant whose dedicated GPUs and shared-pool clusters of a class pass its
        approved quota in a region, by how much and where; exit 1 when there is one."""
        settings = settings_of()
        with Database(settings.database_url).transaction() as db:
            lines = report(db)
        typer.echo("\n".join(lines))
        if len(lines) > 1:
            raise typer.Exit(1)

    cli.add_typer(quota_cli, name="quota")


def report(db: Session) -> list[str]:
    """The check's lines: a summary, then each tenant over quota with its figures."""
    found = over_quota(db)
    if not found:
        return ["every tenant is within its quota: dedicated GPUs + shared-pool cluster GPUs "
                "<= approved, for every class and region"]
    lines = [f"{len(found)} tenant quota(s) over: dedicated GPUs + shared-pool cluster GPUs "
             "> approved"]
    for over in found:
        lines.extend(_described(db, over))
    return lines


def _described(db: Session, over: OverQuota) -> list[str]:
    named = gpu_classes.named_class(db, over.gpu_class_id)
    class_name = named.display_name if named else f"class {over.gpu_class_id}"
    held = over.standing
    return [
        f"{over.tenant} {class_name} in region {over.region or '(none)'}: {held.over} over "
        f"({held.dedicated} dedicated + {held.shared_held} in shared-pool clusters on "
        f"{held.approved} approved)",
        *(f"  dedicated node {line}" for line in _listed(over.dedicated_nodes)),
        *(f"  shared-pool cluster {line}" for line in _listed(over.shared_clusters)),
    ]


def _listed(holdings: list[Holding]) -> list[str]:
    return [f"{h.name} on host {h.host}: {h.gpus} GPUs" for h in holdings]
