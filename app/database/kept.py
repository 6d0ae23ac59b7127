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

from sqlalchemy import event
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction

T = TypeVar("T")


class Kept(Generic[T]):
    def __init__(self, name: str, watched: tuple[type[Any], ...], read: Callable[[Session], T],
                 max_age: float = 2.0) -> None:
        self.watched = watched
        self.read = read
        self.max_age = max_age
        self._changed = f"kept.{name}.changed"
        self._kept: WeakKeyDictionary[object, tuple[float, T]] = WeakKeyDictionary()
        event.listen(Session, "after_flush", self._forget_flushed_changes)
        event.listen(Session, "do_orm_execute", self._forget_bulk_changes)
        event.listen(Session, "after_commit", self._forget_on_commit)
        event.listen(Session, "after_soft_rollback", self._nothing_changed)

    def get(self, db: Session, clock: Callable[[], float] = time.monotonic) -> T:
        if db.info.get(self._changed):
            return self.read(db)
        bind = db.get_bind()
        now = clock()
        hit = self._kept.get(bind)
        if hit is not None and now - hit[0] < self.max_age:
            return hit[1]
        figures = self.read(db)
        self._kept[bind] = (now, figures)
        return figures

    def forget(self, session: Session) -> None:
        self._kept.pop(session.get_bind(), None)

    def _forget_flushed_changes(self, session: Session, _flush: UOWTransaction) -> None:
        touched = (*session.new, *session.dirty, *session.deleted)
        if any(isinstance(row, self.watched) for row in touched):
            self._note_change(session)

    def _forget_bulk_changes(self, state: ORMExecuteState) -> None:
        mapper = state.bind_mapper
        if (state.is_update or state.is_delete or state.is_insert) and mapper is not None \
                and issubclass(mapper.class_, self.watched):
            self._note_change(state.session)

    def _note_change(self, session: Session) -> None:
        session.info[self._changed] = True
        self.forget(session)

    def _forget_on_commit(self, session: Session) -> None:
        # A request that read between this session's flush and its commit kept the old figures.
        if session.info.pop(self._changed, False):
            self.forget(session)

    def _nothing_changed(self, session: Session, _previous: Any) -> None:
        # Forgotten too: a session sharing this one's connection (a test's) may have read it.
        if session.info.pop(self._changed, False):
            self.forget(session)
