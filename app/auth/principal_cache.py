"""Who a token or a signed-in user is, remembered for a few seconds across requests.

``ExpiringCache`` is also what ``app.tenants.access`` keeps tenants in, and
``app.auth.sessions`` signed-in browser sessions, under the same rules.

Why: resolving the caller costs three queries (token, user, memberships) on every request, a
third of a list request's time at fleet scale. How long a cached answer may be stale:
- in this process, not at all: a commit that changes a user, an API token or a membership,
  or ends a browser session, empties the cache (SQLAlchemy session events, so no service has
  to remember to);
- in another process or replica on PostgreSQL, within a second: such a commit also sends a
  ``NOTIFY`` that every process's listener (``listen_for_changes``) answers by emptying its
  caches; while a process's listener is not connected, at most ``PORTAL_AUTH_CACHE_SECONDS``
  (5 s by default; 0 turns the cache off), the bound on SQLite too. Kubernetes' own webhook
  token cache keeps answers for 2 minutes.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import datetime
from time import monotonic as monotonic  # re-exported: tests move the clock
from typing import Any, Generic, TypeVar

from sqlalchemy import Table, event
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction

from app.auth.principal import Principal
from app.database.core import Database, utcnow
from app.database.notify import Listener, announce, is_postgresql, transaction_ended
from app.database.prepared import on_row_inserted

# Pass as an execution option on a bulk UPDATE that changes nothing about who a caller is
# (a token's last use), so that it does not empty the cache.
AUTH_UNCHANGED = "auth_unchanged"
_CHANGED = "principal_cache.changed"
# Where commits that empty the caches are announced to the other processes.
CHANNEL = "portal_callers_changed"

V = TypeVar("V")


@dataclass(frozen=True)
class _Entry(Generic[V]):
    value: V
    fresh_until: float  # monotonic()
    valid_until: datetime | None  # e.g. a token's own expiry


class ExpiringCache(Generic[V]):
    """Bounded (least recently used out first), each entry fresh for ``seconds``; every cache
    of the process is emptied by a commit that touches a ``watch``ed model."""

    def __init__(self, seconds: float, max_entries: int = 10_000) -> None:
        self.seconds = seconds
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, _Entry[V]] = OrderedDict()
        self._lock = threading.Lock()
        _caches.add(self)

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry.fresh_until <= monotonic() or (
                entry.valid_until is not None and entry.valid_until <= utcnow()
            ):
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return entry.value

    def put(self, key: Hashable, value: V, valid_until: datetime | None = None) -> None:
        if self.seconds <= 0:
            return
        entry = _Entry(value, monotonic() + self.seconds, valid_until)
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def discard(self, key: Hashable) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


PrincipalCache = ExpiringCache[Principal]

_caches: weakref.WeakSet[ExpiringCache[Any]] = weakref.WeakSet()
_watched: tuple[type[Any], ...] = ()
# Watched models whose new rows change no cached answer (only their updates and deletes do).
_inserts_ignored: tuple[type[Any], ...] = ()
# Watched models whose changed rows change no cached answer (only their deletes do).
_updates_ignored: tuple[type[Any], ...] = ()


def forget_everyone() -> None:
    """Empties every cache of this process."""
    for cache in list(_caches):
        cache.clear()


def watch(*models: type[Any], inserts: bool = True, updates: bool = True) -> None:
    """Commits that insert, change or delete rows of these models empty the caches; with
    ``inserts=False``, only those that change or delete them: for a model whose new row no
    cached answer is made of (a new API token: the cache holds only answers about tokens
    already used); with ``updates=False`` too, only those that delete them (a browser
    session: what is cached of one never changes but by its end)."""
    global _watched, _inserts_ignored, _updates_ignored
    _watched = tuple({*_watched, *models})
    if not inserts:
        _inserts_ignored = tuple({*_inserts_ignored, *models})
    if not updates:
        _updates_ignored = tuple({*_updates_ignored, *models})


def changes_pending(session: Session) -> bool:
    """Whether the session flushed changes to watched rows it has not committed: what it reads
    of them now may yet be rolled back, so it is not for a cache."""
    return bool(session.info.get(_CHANGED))


@event.listens_for(Session, "after_flush")
def _note_flushed_changes(session: Session, _flush: UOWTransaction) -> None:
    new = (row for row in session.new if not isinstance(row, _inserts_ignored))
    dirty = (row for row in session.dirty if not isinstance(row, _updates_ignored))
    if any(isinstance(row, _watched) for row in (*new, *dirty, *session.deleted)):
        _note_change(session)


@on_row_inserted
def _note_inserted_row(session: Session, table: Table, _row: Any) -> None:
    if any(getattr(model, "__table__", None) is table and not issubclass(model, _inserts_ignored)
           for model in _watched):
        _note_change(session)


@event.listens_for(Session, "do_orm_execute")
def _note_bulk_changes(state: ORMExecuteState) -> None:
    if not (state.is_update or state.is_delete) or state.execution_options.get(AUTH_UNCHANGED):
        return
    mapper = state.bind_mapper
    if mapper is None or not issubclass(mapper.class_, _watched):
        return
    if state.is_delete or not issubclass(mapper.class_, _updates_ignored):
        _note_change(state.session)


def _note_change(session: Session) -> None:
    session.info[_CHANGED] = True
    announce(session, CHANNEL)


@event.listens_for(Session, "after_commit")
def _forget_on_commit(session: Session) -> None:
    transaction_ended(session)
    if session.info.pop(_CHANGED, False):
        forget_everyone()


@event.listens_for(Session, "after_soft_rollback")
def _keep_on_rollback(session: Session, _previous: Any) -> None:
    transaction_ended(session)
    session.info.pop(_CHANGED, None)


def listen_for_changes(database: Database) -> Listener | None:
    """Started: a thread that empties this process's caches whenever another process commits
    a change to who a caller is. None off PostgreSQL (no such signal there)."""
    if not is_postgresql(database.engine):
        return None
    listener = Listener(database.engine, CHANNEL, forget_everyone)
    listener.start()
    return listener
