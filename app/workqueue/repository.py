"""SQL of the work queue: enqueue, claim with a fenced lease, renew, finish.

Claims skip rows another transaction has locked on PostgreSQL (``FOR UPDATE SKIP LOCKED``);
SQLite has one writer and ignores the clause, so the UPDATE repeats the claim's conditions and
a row is never taken twice on either.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, and_, case, delete, func, or_, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.database.core import utcnow
from app.database.prepared import PreparedInsert
from app.workqueue.models import WorkItem

# (kind, key)
Ref = tuple[str, str]


@dataclass(frozen=True)
class Claimed:
    kind: str
    key: str
    token: str
    attempts: int


def _insert(db: Session, rows: list[dict[str, object]]):  # type: ignore[no-untyped-def]
    dialect = postgresql if db.get_bind().dialect.name == "postgresql" else sqlite
    return dialect.insert(WorkItem).values(rows)


def enqueue(db: Session, kind: str, key: str | int, at: datetime | None = None) -> None:
    """Makes ``(kind, key)`` due at ``at`` (now) unless it is due sooner; one held by a worker
    is due again as soon as that worker finishes. Part of the caller's transaction."""
    enqueue_many(db, kind, [key], at)


def enqueue_many(db: Session, kind: str, keys: Iterable[str | int],
                 at: datetime | None = None) -> None:
    due = at or utcnow()
    rows: list[dict[str, object]] = [{"kind": kind, "key": str(k), "due_at": due}
                                     for k in dict.fromkeys(str(k) for k in keys)]
    if len(rows) == 1:  # the usual: one row, on the cursor
        _ENQUEUE_ONE.add(db, rows[0])
    elif rows:
        db.execute(_ENQUEUE[db.get_bind().dialect.name == "postgresql"], rows)


def _enqueue(dialect: Any) -> Any:
    """The upsert ``enqueue_many`` runs with its rows as parameters: one statement for any
    number of rows, compiled once (rows given as ``values`` make a statement of their own)."""
    statement = dialect.insert(WorkItem)
    excluded = statement.excluded
    return statement.on_conflict_do_update(
        index_elements=[WorkItem.kind, WorkItem.key],
        set_={"due_at": case((excluded.due_at < WorkItem.due_at, excluded.due_at),
                             else_=WorkItem.due_at),
              "requeue": WorkItem.lease_owner.is_not(None)})


_ENQUEUE = {True: _enqueue(postgresql), False: _enqueue(sqlite)}
_ENQUEUE_ONE = PreparedInsert(cast(Table, WorkItem.__table__), statement_for=lambda dialect:
                              _ENQUEUE[dialect.name == "postgresql"])


def ask(db: Session, kind: str, key: str) -> None:
    """Makes ``(kind, key)`` due now, as ``enqueue`` does, unless it is failing: a key in
    backoff keeps its schedule, however often others wait on it and ask."""
    statement = _insert(db, [{"kind": kind, "key": key, "due_at": utcnow()}])
    excluded = statement.excluded
    db.execute(statement.on_conflict_do_update(
        index_elements=[WorkItem.kind, WorkItem.key],
        set_={"due_at": case(((WorkItem.attempts == 0) & (excluded.due_at < WorkItem.due_at),
                              excluded.due_at), else_=WorkItem.due_at)}))


def seed(db: Session, kind: str, keys: Iterable[str], now: datetime) -> None:
    """Adds the keys the queue does not know yet, due now; the known keep their schedule."""
    rows: list[dict[str, object]] = [{"kind": kind, "key": k, "due_at": now}
                                     for k in dict.fromkeys(keys)]
    if rows:
        db.execute(_insert(db, rows).on_conflict_do_nothing(
            index_elements=[WorkItem.kind, WorkItem.key]))


def _free(now: datetime):  # type: ignore[no-untyped-def]
    return or_(WorkItem.lease_expires_at.is_(None), WorkItem.lease_expires_at < now)


def claim(db: Session, kinds: Collection[str], token: str, now: datetime, until: datetime,
          limit: int, exclude: Collection[Ref] = ()) -> list[Claimed]:
    """Takes the lease on up to ``limit`` due items of ``kinds`` no live lease holds, the most
    overdue first, leaving out ``exclude``. ``token`` fences every later write of the holder
    (``holds``, ``finish``)."""
    due = and_(WorkItem.kind.in_(list(kinds)), WorkItem.due_at <= now, _free(now))
    if exclude:
        due = and_(due, tuple_(WorkItem.kind, WorkItem.key).not_in(list(exclude)))
    chosen = (select(WorkItem.kind, WorkItem.key).where(due).order_by(WorkItem.due_at)
              .limit(limit).with_for_update(skip_locked=True))
    if db.get_bind().dialect.name == "postgresql":
        # Materialized, the candidates are chosen and locked once; as an IN subquery the
        # planner may rescan them for each row, and SKIP LOCKED hands each scan other rows.
        picked = chosen.cte("chosen").prefix_with("MATERIALIZED")
        which = and_(WorkItem.kind == picked.c.kind, WorkItem.key == picked.c.key)
    else:
        which = tuple_(WorkItem.kind, WorkItem.key).in_(chosen.correlate(None))
    rows = db.execute(
        update(WorkItem)
        .where(which, due)
        .values(lease_owner=token, lease_expires_at=until, requeue=False)
        .returning(WorkItem.kind, WorkItem.key, WorkItem.attempts)
        .execution_options(synchronize_session=False)).all()
    return [Claimed(kind, key, token, attempts) for kind, key, attempts in rows]


def renew(db: Session, held: Mapping[Ref, str], until: datetime) -> set[Ref]:
    """Stretches to ``until`` each lease still held under its token; those returned are."""
    if not held:
        return set()
    rows = db.execute(
        update(WorkItem)
        .where(tuple_(WorkItem.kind, WorkItem.key, WorkItem.lease_owner).in_(
            [(kind, key, token) for (kind, key), token in held.items()]))
        .values(lease_expires_at=until)
        .returning(WorkItem.kind, WorkItem.key)
        .execution_options(synchronize_session=False)).all()
    return {(kind, key) for kind, key in rows}


def holds(db: Session, kind: str, key: str, token: str) -> bool:
    """Whether ``token`` still holds the item, locking its row until the caller's transaction
    ends: a write made in that transaction cannot race a new claim."""
    found = db.scalar(select(WorkItem.key)
                      .where(WorkItem.kind == kind, WorkItem.key == key,
                             WorkItem.lease_owner == token)
                      .with_for_update())
    return found is not None


def finish(db: Session, kind: str, key: str, token: str, *, next_at: datetime,
           now: datetime, attempts: int, error: str | None) -> bool:
    """Ends the lease and schedules the next run (now if it was enqueued meanwhile); False
    when the lease had been lost."""
    return _release(db, kind, key, token, next_at, now, attempts=attempts, last_error=error)


def postpone(db: Session, kind: str, key: str, token: str, *, next_at: datetime,
             now: datetime) -> bool:
    """Ends the lease of an item that was not run, keeping its attempts and last error."""
    return _release(db, kind, key, token, next_at, now)


def _release(db: Session, kind: str, key: str, token: str, next_at: datetime, now: datetime,
             **values: object) -> bool:
    done = db.execute(
        update(WorkItem)
        .where(WorkItem.kind == kind, WorkItem.key == key, WorkItem.lease_owner == token)
        .values(lease_owner=None, lease_expires_at=None, requeue=False,
                due_at=case((WorkItem.requeue, now), else_=next_at), **values)
        .execution_options(synchronize_session=False))
    return bool(done.rowcount)  # type: ignore[attr-defined]


def forget(db: Session, kind: str, key: str, token: str, now: datetime) -> bool:
    """Drops an item whose object is gone, unless it was enqueued meanwhile (then it is due
    now, and its reconcile finds out)."""
    gone = db.execute(
        delete(WorkItem)
        .where(WorkItem.kind == kind, WorkItem.key == key, WorkItem.lease_owner == token,
               WorkItem.requeue.is_(False))
        .execution_options(synchronize_session=False))
    if gone.rowcount:  # type: ignore[attr-defined]
        return True
    return finish(db, kind, key, token, next_at=now, now=now, attempts=0, error=None)


def items(db: Session, kind: str | None = None) -> list[WorkItem]:
    query = select(WorkItem).order_by(WorkItem.kind, WorkItem.due_at)
    if kind is not None:
        query = query.where(WorkItem.kind == kind)
    return list(db.scalars(query))


def due_per_kind(db: Session, now: datetime) -> dict[str, tuple[int, datetime]]:
    """Per kind with any, the items due now that no live lease holds, and the oldest one's due
    time: the queue's backlog."""
    rows = db.execute(select(WorkItem.kind, func.count(), func.min(WorkItem.due_at))
                      .where(WorkItem.due_at <= now, _free(now)).group_by(WorkItem.kind))
    return {kind: (int(count), oldest) for kind, count, oldest in rows}
