"""Your notification preferences: which kinds the portal emails you."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from app.portalctl.common import Output, api, command_group
from app.portalctl.output import Format, emit

notifications_app = command_group("Notifications the portal emails you, and your choices.")

PATH = "/api/v1/me/notification-preferences"
COLUMNS = ("kind", "email", "title", "mandatory")


class Switch(StrEnum):
    on = "on"
    off = "off"


Kind = Annotated[str, typer.Argument(help="the kind, e.g. cluster.ready (see notifications "
                                          "prefs)")]


@notifications_app.command("prefs")
def notifications_prefs(output: Output = Format.table) -> None:
    """Show each kind you can receive and whether it is emailed to you; a mandatory kind
    (the deletion warning) is always sent.

    Example: portalctl notifications prefs
    """
    with api() as client:
        choices = client.get(PATH)
    emit(choices if output is not Format.table else [_row(c) for c in choices], output,
         COLUMNS)


@notifications_app.command("set")
def notifications_set(kind: Kind, email: Annotated[Switch, typer.Argument(
        metavar="on|off", help="email it to you, or not")],
                      output: Output = Format.table) -> None:
    """Turn a kind's email on or off for you (a mandatory kind cannot be turned off).

    Example: portalctl notifications set cluster.asleep off
    """
    with api() as client:
        choices = client.request("PUT", PATH, json={
            "preferences": [{"kind": kind, "email": email is Switch.on}]})
    if output is not Format.table:
        emit([c for c in choices if c["kind"] == kind], output, COLUMNS)
        return
    typer.echo(f"{kind}: email {email.value}")


def _row(choice: dict[str, Any]) -> dict[str, Any]:
    return {**choice, "email": "on" if choice["email"] else "off",
            "mandatory": "cannot be turned off" if choice["mandatory"] else ""}
