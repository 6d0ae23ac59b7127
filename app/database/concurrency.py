"""Row locks and conflict-safe inserts that behave on PostgreSQL and on SQLite.

PostgreSQL gets ``SELECT ... FOR UPDATE``. SQLite ignores that clause, so the same call also
makes a no-op write on the row: it takes SQLite's single write lock, which serialises writers
and guarantees that every read after it in the transaction sees the latest committed data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from app.database.core import Base
from app.database.prepared import PreparedInsert
from app.kit.errors import Conflict

M = TypeVar("M", bound=Base)


def lock_row(db: Session, model: type[M], row_id: int, *, shared: bool = False,
             keys_free: bool = False) -> M | None:
    """``shared``: ``FOR SHARE`` on PostgreSQL, so holders wait only for writers of the row.
    ``keys_free``: ``FOR NO KEY UPDATE``, which rows referencing this one (their foreign key
    checks take ``FOR KEY SHARE``) need not wait for: a lock that only serialises its holders,
    as a count against a limit needs, without queueing every insert that names the row."""
    primary_key: Any = model.__mapper__.primary_key[0]
    lock_rows(db, model, primary_key == row_id)
    query = (select(model).where(primary_key == row_id)
             .with_for_update(read=shared, key_share=keys_free))
    return db.scalar(query.execution_options(populate_existing=True))


def lock_rows(db: Session, model: type[M], *where: ColumnElement[bool]) -> None:
    """On SQLite, the write lock that ``FOR UPDATE`` of the rows ``where`` selects stands for on
    PostgreSQL (a no-op write); nothing on PostgreSQL."""
    if db.get_bind().dialect.name != "sqlite":
        return
    primary_key: Any = model.__mapper__.primary_key[0]
    db.execute(update(model).where(*where).values({primary_key.name: primary_key}))


def insert_or_conflict(db: Session, row: Base, conflict: Conflict) -> None:
    """Adds a row; a unique constraint lost to a parallel request becomes ``conflict``."""
    try:
        with db.begin_nested():
            db.add(row)
    except IntegrityError as error:
        raise conflict from error


def add_first_or_conflict(db: Session, add: PreparedInsert, values: Mapping[str, Any],
                          conflict: Conflict) -> Any:
    """``insert_or_conflict`` for a transaction's first write, without the savepoint's two
    round trips: on the conflict the transaction is rolled back (it had written nothing, and
    its locks were only for this insert), and the session is usable again. The row as
    ``add`` returns it."""
    try:
        return add.add(db, values)
    except IntegrityError as error:
        db.rollback()
        raise conflict from error


def upsert(db: Session, model: type[Base], rows: Sequence[dict[str, Any]],
           keys: Sequence[str]) -> None:
    """Inserts ``rows``, overwriting those whose ``keys`` exist: two workers writing the same
    rows at once both succeed (the later wins), where a delete and insert would collide."""
    if not rows:
        return
    dialect = postgresql if db.get_bind().dialect.name == "postgresql" else sqlite
    statement = dialect.insert(model).values(list(rows))
    changed = {name: statement.excluded[name] for name in rows[0] if name not in keys}
    db.execute(statement.on_conflict_do_update(index_elements=list(keys), set_=changed))


# PostgreSQL's codes for a transaction that lost to another one: a row lock not had within
# ``lock_timeout``, a deadlock, a serialization failure. Trying again later may well succeed.
_CONTENDED = frozenset({"55P03", "40P01", "40001"})
_CANCELLED = "57014"  # query_canceled: ``statement_timeout`` ran out


def contended(error: DBAPIError) -> bool:
    """Whether ``error`` is a lost race for a row (answered 409 with ``Retry-After``); on
    SQLite, its one write lock not had within the busy timeout."""
    busy = getattr(error.orig, "sqlite_errorname", None) in ("SQLITE_BUSY", "SQLITE_LOCKED")
    return busy or _sqlstate(error) in _CONTENDED


def timed_out(error: DBAPIError) -> bool:
    """Whether ``error`` is a statement cancelled by ``statement_timeout``."""
    return _sqlstate(error) == _CANCELLED


def _sqlstate(error: DBAPIError) -> str | None:
    code = getattr(error.orig, "sqlstate", None)
    return code if isinstance(code, str) else None
