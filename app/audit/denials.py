"""Refused requests in the audit log: the first of a kind per window, then one row for the rest.

A kind is (status, who, route): who is the signed-in actor or, for a caller nobody knows, its
address; the route is the template (``GET /api/v1/tenants/{tenant}``), so a caller walking ids
makes one kind. The first denial of a kind is written at once, as it always was (its own path
and detail). Further ones within ``window_seconds`` of it are only counted, in memory, and
written as one ``authz.denied`` row with ``count``, ``window_start`` and ``window_end`` once the
window has closed: at the next denial after it, at the web process's periodic flush, or when the
process stops (then with the window cut short). Counts of a process that is killed are lost.

Why: each denial used to write a row, so anyone could make the portal write as fast as it
answered (2,000 bad tokens in 12 s: 2,000 rows).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from app.audit.service import record
from app.database import core
from app.database.core import Database

log = logging.getLogger(__name__)

DENIED = "authz.denied"
MAX_KINDS = 10_000
# Closed windows waiting for the next flush; past this, counts are dropped with a warning.
MAX_WAITING = 10_000


@dataclass(frozen=True)
class Denial:
    status: int
    who: str  # the actor's label, or "anonymous (<address>)"
    actor_id: int | None
    route: str  # "GET /api/v1/tenants/{tenant}": what denials are counted together by
    path: str  # "GET /api/v1/tenants/acme": what the first one's row names
    detail: str

    @property
    def kind(self) -> tuple[int, int | None, str, str]:
        return self.status, self.actor_id, self.who, self.route


@dataclass(frozen=True)
class Tally:
    """Denials of one kind within one window that no row holds yet."""

    first: Denial
    count: int
    window_start: datetime
    window_end: datetime


@dataclass
class _Window:
    first: Denial
    started: float  # core.monotonic()
    started_at: datetime
    unwritten: int


class DenialLog:
    def __init__(self, window_seconds: float, max_kinds: int = MAX_KINDS) -> None:
        self.window_seconds = window_seconds
        self.max_kinds = max_kinds
        # By when their window began: the closed ones are at the front.
        self._windows: OrderedDict[tuple[int, int | None, str, str], _Window] = OrderedDict()
        self._closed: list[Tally] = []
        self._lost = 0
        self._lock = threading.Lock()

    def admit(self, denial: Denial) -> bool:
        """True for the first denial of its kind in a window: write it now (``record_denial``);
        a later one is counted for the window's row."""
        return self._note(denial, written=True)

    def count_only(self, denial: Denial) -> None:
        """Counted for the window's row even when it is the first: for callers that must not
        touch the database (a throttled request)."""
        self._note(denial, written=False)

    def _note(self, denial: Denial, *, written: bool) -> bool:
        now = core.monotonic()
        with self._lock:
            self._close_expired(now)
            window = self._windows.get(denial.kind)
            if window is not None:
                window.unwritten += 1
                return False
            self._windows[denial.kind] = _Window(denial, now, core.utcnow(), 0 if written else 1)
            while len(self._windows) > self.max_kinds:
                _kind, oldest = self._windows.popitem(last=False)
                self._close(oldest, core.utcnow())
            return written

    def due(self) -> list[Tally]:
        """The counts of closed windows, to write now; each is handed out once."""
        with self._lock:
            self._close_expired(core.monotonic())
            return self._take_closed()

    def drain(self) -> list[Tally]:
        """Every count, open windows cut short: when the process stops."""
        with self._lock:
            now = core.utcnow()
            while self._windows:
                self._close(self._windows.popitem(last=False)[1], now)
            return self._take_closed()

    def _close_expired(self, now: float) -> None:
        while self._windows:
            window = next(iter(self._windows.values()))
            if window.started + self.window_seconds > now:
                return
            self._windows.popitem(last=False)
            self._close(window, window.started_at + timedelta(seconds=self.window_seconds))

    def _close(self, window: _Window, ended_at: datetime) -> None:
        if not window.unwritten:
            return
        if len(self._closed) >= MAX_WAITING:
            self._lost += window.unwritten
            return
        end = min(ended_at, window.started_at + timedelta(seconds=self.window_seconds))
        self._closed.append(Tally(window.first, window.unwritten, window.started_at, end))

    def _take_closed(self) -> list[Tally]:
        closed, self._closed = self._closed, []
        if self._lost:
            log.warning("%d denied requests were not written to the audit log: more kinds of "
                        "denial closed than could wait for a flush", self._lost)
            self._lost = 0
        return closed


def record_denial(db: Session, denial: Denial) -> None:
    record(db, action=DENIED, actor_id=denial.actor_id, actor_label=denial.who,
           target_type="route", target_id=denial.path,
           after={"status": denial.status, "detail": denial.detail})


def record_tally(db: Session, tally: Tally) -> None:
    first = tally.first
    label = "any route" if first.route == "*" else ""
    record(db, action=DENIED, actor_id=first.actor_id, actor_label=first.who,
           target_type="route", target_id=first.route, target_label=label,
           after={"status": first.status, "detail": first.detail, "count": tally.count,
                  "window_start": _iso(tally.window_start),
                  "window_end": _iso(tally.window_end)})


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def write(database: Database, tallies: list[Tally], first: Denial | None = None) -> None:
    """In a transaction of its own: a refused request's own is rolled back."""
    with database.transaction() as db:
        for tally in tallies:  # older than ``first``: the log reads in order
            record_tally(db, tally)
        if first is not None:
            record_denial(db, first)
