"""The audit log: filtered reads, and following it as events happen."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Annotated, Any

import typer
import yaml

from app.portalctl.client import Client
from app.portalctl.common import Output, api
from app.portalctl.output import Format, emit

AUDIT_PATH = "/api/v1/audit"
COLUMNS = ("id", "occurred_at", "actor", "tenant", "action", "target")
# Each poll also looks back over this many already-shown events: an event whose transaction
# commits late has an id below newer ones, and would otherwise be skipped.
LOOK_BACK = 50


def audit(
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="tenant slug")] = None,
    actor: Annotated[str | None, typer.Option(help="the actor's email")] = None,
    action: Annotated[str | None, typer.Option(
        help="an action, or a family ending in '.' (e.g. quota_request.)")] = None,
    since: Annotated[str | None, typer.Option(help="ISO 8601, e.g. 2026-11-30T08:00Z")] = None,
    until: Annotated[str | None, typer.Option(help="ISO 8601")] = None,
    limit: Annotated[int, typer.Option(help="at most this many events (newest)", min=1)] = 50,
    sign_ins: Annotated[bool, typer.Option(
        "--sign-ins/--no-sign-ins", help="with or without sign-in events")] = True,
    follow: Annotated[bool, typer.Option(
        "--follow", "-f", help="then print new events as they happen, until Ctrl-C")] = False,
    interval: Annotated[float, typer.Option(help="seconds between polls with --follow",
                                            min=0.1)] = 2.0,
    output: Output = Format.table,
) -> None:
    """Read the audit log (tenant admins: their tenants; platform admins: everything).

    Without --follow, the newest events first. With --follow, oldest first and then each new
    event as it happens, one per line with -o json (JSON Lines); Ctrl-C ends it (exit 0).

    Example: portalctl audit --tenant acme --action quota_request. --follow
    """
    filters = {"tenant": tenant, "actor": actor, "action": action, "since": since,
               "until": until, "sign_ins": None if sign_ins else False}
    with api() as client:
        newest = list(client.items(AUDIT_PATH, limit, **filters))
        if not follow:
            emit(newest if output is not Format.table else [_row(e) for e in newest], output,
                 COLUMNS)
            return
        with _until_ctrl_c() as stopped:
            _follow(client, filters, list(reversed(newest)), interval, output, stopped)


def _follow(client: Client, filters: dict[str, Any], first: list[dict[str, Any]],
            interval: float, output: Format, stopped: CtrlC) -> None:
    if output is Format.table:
        typer.secho("  ".join(c.upper() for c in COLUMNS), bold=True)
    cursor = Cursor(first)
    _print_stream(first, output)
    while not stopped.pressed:
        time.sleep(interval)  # Ctrl-C cuts it short only by the rest of one interval
        if not stopped.pressed:
            _print_stream(cursor.advance(client.items(AUDIT_PATH, **filters)), output)


class CtrlC:
    """Whether Ctrl-C was pressed: a plain flag. The handler takes no lock: it runs in the main
    thread between two of its steps, and a ``threading.Event`` set there deadlocked when the
    signal landed while ``Event.wait`` held the event's own lock (a follow that never ended)."""

    pressed = False


@contextmanager
def _until_ctrl_c() -> Iterator[CtrlC]:
    """Ctrl-C (SIGINT) notes itself instead of raising KeyboardInterrupt wherever the HTTP
    client happens to be: an interrupt inside its connection pool can leave a lock held, and
    closing the client then hangs. The poll under way finishes; a second Ctrl-C interrupts it."""
    stopped = CtrlC()

    def handler(signum: int, frame: FrameType | None) -> None:
        if stopped.pressed:
            signal.default_int_handler(signum, frame)
        stopped.pressed = True

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield stopped
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)


class Cursor:
    """Where following has got to: the newest id shown and which ids were shown near it."""

    def __init__(self, shown: list[dict[str, Any]]) -> None:
        ids = [int(e["id"]) for e in shown]
        self.newest = max(ids, default=0)
        # Below the first event shown, events were left out on purpose (--limit).
        self.floor = min(ids, default=1) - 1
        self.recent = set(ids)

    def advance(self, newest_first: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """The events not shown yet, oldest first."""
        fresh: list[dict[str, Any]] = []
        looked_back = 0
        for event in newest_first:
            event_id = int(event["id"])
            if event_id <= self.floor:
                break
            if event_id <= self.newest:
                looked_back += 1
                if looked_back > LOOK_BACK:
                    break
            if event_id not in self.recent:
                fresh.append(event)
        fresh.reverse()
        self.recent.update(int(e["id"]) for e in fresh)
        self.newest = max([self.newest, *self.recent])
        # The look-back window holds the newest events shown: remembering more is not needed.
        self.recent = set(sorted(self.recent)[-2 * LOOK_BACK:])
        return fresh


def _print_stream(events: list[dict[str, Any]], output: Format) -> None:
    for event in events:
        if output is Format.json:
            typer.echo(json.dumps(event))
        elif output is Format.yaml:
            typer.echo("---\n" + yaml.safe_dump(event, sort_keys=False), nl=False)
        else:
            row = _row(event)
            typer.echo("  ".join("-" if row.get(c) is None else str(row[c]) for c in COLUMNS))


def _row(event: dict[str, Any]) -> dict[str, Any]:
    """A table row: the target by the name recorded with the event, else its kind and id; a
    row counting repeated denials says how many and until when."""
    label = event.get("target_label") or f"{event['target_type']} {event['target_id']}"
    after = event.get("after") or {}
    if isinstance(after.get("count"), int):
        label += f" ({after['count']} times until {after.get('window_end', '?')})"
    return {**event, "target": label}
