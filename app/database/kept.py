"""Figures read from a few tables and kept briefly per database, for hot paths that may see
them a little late.

A ``Kept`` is read at most ``max_age`` seconds ago. A change to one of its ``watched`` tables
flushed (or bulk-written) through a session of this process forgets it at once, and until
that session commits or rolls back, that session reads afresh (its change is not for other
requests to see yet); a change made by another process shows within ``max_age``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Table, event
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction

from app.database.prepared import on_row_inserted

T = TypeVar("T")

# How long a figure is kept at most, unless its ``Kept`` says otherwise.
MAX_AGE_SECONDS = 2.0
_CHANGED = "kept.changed"  # session.info: the kept figures this session's writes changed


class Kept(Generic[T]):
    def __init__(self, name: str, watched: tuple[type[Any], ...], read: Callable[[Session], T],
                 max_age: float = MAX_AGE_SECONDS) -> None:
        self.name = name
        self.watched = watched
        self.read = read
        self.max_age = max_age
        self._kept: WeakKeyDictionary[object, tuple[float, T]] = WeakKeyDictionary()
        _every_kept.append(self)

    def get(self, db: Session, clock: Callable[[], float] = time.monotonic) -> T:
        if self in db.info.get(_CHANGED, ()):
            return self.read(db)
        where = _database_of(db)
        now = clock()
        hit = self._kept.get(where)
        if hit is not None and now - hit[0] < self.max_age:
            return hit[1]
        figures = self.read(db)
        self._kept[where] = (now, figures)
        return figures

    def forget(self, session: Session) -> None:
        self._kept.pop(_database_of(session), None)


def _database_of(session: Session) -> object:
    """What figures are kept per: an engine's pool, which its sessions that only read share
    with those that write though they bind to a copy of it with other options; a test's one
    shared connection."""
    bind = session.get_bind()
    return bind if isinstance(bind, Connection) else bind.pool


# One set of session listeners for every Kept: each is called for every statement and flush.
_every_kept: list[Kept[Any]] = []


def forget_everything(session: Session) -> None:
    """Every figure kept for ``session``'s database: each is read afresh when next asked."""
    for kept in _every_kept:
        kept.forget(session)


def _note_changes(session: Session, changed_types: set[type[Any]]) -> None:
    for kept in _every_kept:
        if any(issubclass(changed, kept.watched) for changed in changed_types):
            session.info.setdefault(_CHANGED, set()).add(kept)
            kept.forget(session)


@event.listens_for(Session, "after_flush")
def _forget_flushed_changes(session: Session, _flush: UOWTransaction) -> None:
    _note_changes(session, {type(row) for row in (*session.new, *session.dirty,
                                                  *session.deleted)})


@on_row_inserted
def _forget_inserted_row(session: Session, table: Table, _row: Any) -> None:
    _note_changes(session, {model for kept in _every_kept for model in kept.watched
                            if getattr(model, "__table__", None) is table})


@event.listens_for(Session, "do_orm_execute")
def _forget_bulk_changes(state: ORMExecuteState) -> None:
    if not (state.is_update or state.is_delete or state.is_insert):
        return
    mapper = state.bind_mapper
    if mapper is not None:
        _note_changes(state.session, {mapper.class_})


@event.listens_for(Session, "after_commit")
def _forget_on_commit(session: Session) -> None:
    # A request that read between this session's flush and its commit kept the old figures.
    _forget_changed(session)


@event.listens_for(Session, "after_soft_rollback")
def _nothing_changed(session: Session, _previous: Any) -> None:
    # Forgotten too: a session sharing this one's connection (a test's) may have read it.
    _forget_changed(session)


def _forget_changed(session: Session) -> None:
    for kept in session.info.pop(_CHANGED, ()):
        kept.forget(session)
