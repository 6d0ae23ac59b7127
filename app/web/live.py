"""Server-Sent Events that tell a page when what it shows has changed.

A stream carries no data of its own: it sends ``changed`` when a cheap fingerprint of the
page's subject moves, and the page fetches its partial through the ordinary, authorized
route (htmx's SSE extension: ``hx-trigger="sse:changed"``). Between checks the stream holds
no database session; each check opens a short one on a worker thread. Streams are counted
apart from the load shedder's requests in flight (they live under ``/live/``), capped here,
and end after a bounded lifetime, after which the browser reconnects by itself.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import anyio
from fastapi import Request
from sqlalchemy.orm import Session
from starlette.responses import StreamingResponse

from app.database.core import Database
from app.http import hop
from app.kit.errors import NotFound, ServiceUnavailable

PREFIX = "/live"
Fingerprint = Callable[[Session], str]
"""Reads the subject's version in the given session; raises NotFound when it is gone."""


@dataclass
class Timing:
    check_seconds: float = 2.0
    keepalive_seconds: float = 15.0
    lifetime_seconds: float = 300.0
    reconnect_ms: int = 3000


@dataclass
class StreamGate:
    """How many streams are open, refusing past ``limit``: each holds a socket, not a thread."""

    limit: int = 200
    open: int = 0

    def check_room(self) -> None:
        if self.open >= self.limit:
            raise ServiceUnavailable("too many live streams are open; the page polls instead")

    def leave(self) -> None:
        self.open -= 1


TIMING = Timing()


def gate_of(request: Request) -> StreamGate:
    state = request.app.state
    if not hasattr(state, "live_streams"):
        state.live_streams = StreamGate()
    gate: StreamGate = state.live_streams
    return gate


def _check(database: Database, fingerprint: Fingerprint) -> str | None:
    """The fingerprint read in a short transaction of its own; ``None`` once the subject is
    gone or hidden from the caller."""
    with database.read_session() as db:
        try:
            return fingerprint(db)
        except NotFound:
            return None


async def event_stream(request: Request, fingerprint: Fingerprint) -> StreamingResponse:
    """A 404 (or 403) before any byte is sent when the caller may not see the subject."""
    database: Database = request.app.state.database
    first = await hop.run_sync(_authorized_check, database, fingerprint)
    gate = gate_of(request)
    gate.check_room()
    return StreamingResponse(
        _events(request, database, fingerprint, first, gate),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _authorized_check(database: Database, fingerprint: Fingerprint) -> str:
    with database.read_session() as db:
        return fingerprint(db)


def message(event: str, data: str, version: str | None = None) -> str:
    """One event; ``id`` is the version, which a reconnecting browser sends back."""
    line = f"id: {version}\n" if version else ""
    return f"{line}event: {event}\ndata: {data}\n\n"


async def _events(request: Request, database: Database, fingerprint: Fingerprint,
                  first: str, gate: StreamGate) -> AsyncIterator[str]:
    timing = TIMING
    # Counted from the first step: a generator never started never runs its ``finally``.
    gate.open += 1
    try:
        # A browser reconnecting after the lifetime says what it last saw: what changed in
        # between is not lost.
        seen = request.headers.get("last-event-id")
        kind = "changed" if seen and seen != first else "ready"
        yield f"retry: {timing.reconnect_ms}\n" + message(kind, first, first)
        last, started = first, time.monotonic()
        last_sent = started
        while time.monotonic() - started < timing.lifetime_seconds:
            await anyio.sleep(timing.check_seconds)
            if await request.is_disconnected():
                return
            current = await hop.run_sync(_check, database, fingerprint)
            if current != last:
                yield message("changed", current or "gone", current)
                if current is None:
                    return
                last, last_sent = current, time.monotonic()
            elif time.monotonic() - last_sent >= timing.keepalive_seconds:
                yield ": keep-alive\n\n"
                last_sent = time.monotonic()
        yield message("bye", "lifetime reached; reconnect")
    finally:
        gate.leave()
