"""Database engine, the declarative base and the unit of work.

The request (or the worker step) owns the transaction: services flush, the caller commits.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from time import monotonic as monotonic  # re-exported: tests move the clock
from typing import Any

from pydantic_core import from_json
from sqlalchemy import JSON, Connection, DateTime, Engine, MetaData, create_engine, event
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import DeclarativeBase, ORMExecuteState, Session, sessionmaker
from sqlalchemy.types import TypeDecorator

from app.database.pool_metrics import CheckoutCount, timed_pool_class
from app.kit.validation import clamped_to_calendar

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_N_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given; use timezone-aware UTC")
        # Stored moments are refused off the calendar before they get here (``UtcMoment``); a
        # filter's bound there is the calendar's edge, as ``FilterMoment`` makes it.
        return clamped_to_calendar(value)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON(), list[Any]: JSON()}


@dataclass(frozen=True)
class TimeLimits:
    """PostgreSQL's own bounds on a process's sessions, in seconds (0: none). A web request
    waits for a locked row at most ``lock_wait`` (then answers 409); no statement runs longer
    than ``statement``; a transaction left idle longer than ``idle_in_transaction`` loses its
    connection, and so its locks, whatever the process holding it does."""

    lock_wait: float
    statement: float
    idle_in_transaction: float

    def options(self) -> str:
        """libpq's ``options``: the settings every connection of the engine starts with."""
        settings = {"lock_timeout": self.lock_wait, "statement_timeout": self.statement,
                    "idle_in_transaction_session_timeout": self.idle_in_transaction}
        return " ".join(f"-c {name}={round(seconds * 1000)}"
                        for name, seconds in settings.items())


def make_engine(url: str, limits: TimeLimits | None = None, **kwargs: Any) -> Engine:
    # pydantic-core's parser (Rust) reads the JSON columns (conditions, audit) about twice as
    # fast as ``json.loads``, with the same values.
    kwargs.setdefault("json_deserializer", from_json)
    if (timed := timed_pool_class(url, kwargs)) is not None:
        kwargs["poolclass"] = timed
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30}, **kwargs)
        event.listen(engine, "connect", _configure_sqlite)
        event.listen(engine, "begin", _begin_sqlite)
    else:
        if limits is not None:
            kwargs["connect_args"] = {**kwargs.get("connect_args", {}),
                                      "options": limits.options()}
        engine = create_engine(url, **kwargs)
        event.listen(engine, "checkin", _note_idle_since)
        event.listen(engine, "checkout", _ping_if_idle(engine.dialect))
    return engine


# A pooled connection is checked before use only after this long unused. ``pool_pre_ping``
# checked it on every checkout: a round trip on every request. One in use this recently was
# alive then; if the server went away since, the request that finds out answers 503 and the
# pool drops every connection made before (SQLAlchemy's disconnect handling).
PING_AFTER_IDLE_S = 5.0


def _note_idle_since(_dbapi_connection: Any, record: Any) -> None:
    if record is not None:
        record.info["idle_since"] = monotonic()


def _ping_if_idle(dialect: Dialect) -> Any:
    def ping(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.pop("idle_since", None)
        if idle_since is None or monotonic() - idle_since < PING_AFTER_IDLE_S:
            return
        try:
            dialect.do_ping(dbapi_connection)
        except Exception as error:  # the pool retries with a new connection
            raise DisconnectionError(f"a pooled connection is gone: {error}") from error

    return ping


def _configure_sqlite(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()
    dbapi_connection.isolation_level = None  # the driver's own BEGIN: ``_begin_sqlite`` says it


# Execution option of the sessions that only read: no transaction is begun for them.
SQLITE_READS_ONLY = "sqlite_reads_only"


def _begin_sqlite(connection: Connection) -> None:
    """A transaction that may write takes SQLite's one write lock when it begins, waiting the
    busy timeout for a writer in progress. Begun DEFERRED, it would read first and then, asking
    for the lock while another writer held it, fail at once (SQLite cannot wait there: its
    snapshot may be stale), however short that writer's hold: a web write beside any worker
    write answered 409. Sessions that only read begin nothing, as on PostgreSQL: each
    statement sees what was committed when it began, and never waits for a writer."""
    if not connection.get_execution_options().get(SQLITE_READS_ONLY, False):
        connection.exec_driver_sql("BEGIN IMMEDIATE")


class ReadOnlyViolation(RuntimeError):
    """A session made for a request that only reads was asked to write."""


class ReadOnlySession(Session):
    """A session for a request that only reads: a flush or statement that writes is refused
    (the events below), and so is a write that bypasses both (``PreparedInsert``)."""


REFUSAL = "a read-only request tried to write; give it a read-write session"


def writes_pending(session: Session) -> bool:
    """Whether a flush of ``session`` would write: a row added, deleted or changed."""
    return bool(session.new or session.deleted
                or any(session.is_modified(row) for row in session.dirty))


def _refuse_writes(session: Session, _flush: Any, _instances: Any) -> None:
    if writes_pending(session):
        raise ReadOnlyViolation(REFUSAL)


def _refuse_statements_that_write(state: ORMExecuteState) -> None:
    """An INSERT, UPDATE or DELETE statement, which no flush sees (an audit event's)."""
    if state.is_insert or state.is_update or state.is_delete:
        raise ReadOnlyViolation(REFUSAL)


class Database:
    """One engine and its session factories; the app and the worker each hold one."""

    # Sessions of one that is a single shared connection (``within``) must not overlap except
    # nested, as a request's do: work of its own pace beside the requests (a timer) is not run.
    shares_one_connection = False

    def __init__(self, url: str, limits: TimeLimits | None = None, **engine_kwargs: Any) -> None:
        self.url = url
        self.engine = make_engine(url, limits, **engine_kwargs)
        # Listened after the engine's ping: a checkout it refuses is retried, counted once.
        self.checkouts = CheckoutCount(self.engine)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.read_sessions = self._readers(self.engine)

    @staticmethod
    def _readers(bind: Engine | Connection) -> sessionmaker[Session]:
        """Sessions for requests that only read. On PostgreSQL they run in autocommit: no BEGIN
        and COMMIT round trips around their SELECTs, each of which sees what was committed when
        it began, as it would in a READ COMMITTED transaction."""
        if isinstance(bind, Engine) and bind.dialect.name == "postgresql":
            bind = bind.execution_options(isolation_level="AUTOCOMMIT")
        elif isinstance(bind, Engine):
            bind = bind.execution_options(**{SQLITE_READS_ONLY: True})
        readers: sessionmaker[Session] = sessionmaker(bind, class_=ReadOnlySession,
                                                      expire_on_commit=False)
        event.listen(readers, "before_flush", _refuse_writes)
        event.listen(readers, "do_orm_execute", _refuse_statements_that_write)
        return readers

    def count_pool_as(self, process: str) -> Database:
        """Names this pool in the metrics: ``web`` (unless told), ``worker``."""
        self.checkouts.process = process
        return self

    def configure_sessions(self, **options: Any) -> None:
        """Options (e.g. ``info``) for every session made from now on."""
        self.sessions.configure(**options)
        self.read_sessions.configure(**options)

    @classmethod
    def within(cls, connection: Connection) -> Database:
        """Sessions that commit to savepoints of an outer transaction the caller rolls back."""
        database = cls.__new__(cls)
        database.shares_one_connection = True
        database.url = str(connection.engine.url)
        database.engine = connection.engine
        database.sessions = sessionmaker(
            bind=connection, expire_on_commit=False, join_transaction_mode="create_savepoint"
        )
        database.read_sessions = cls._readers(connection)
        database.read_sessions.configure(join_transaction_mode="create_savepoint")
        return database

    def session(self) -> Session:
        return self.sessions()

    def read_session(self) -> Session:
        return self.read_sessions()

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session committed on success and rolled back on error."""
        with self.sessions() as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    def dispose(self) -> None:
        self.engine.dispose()
