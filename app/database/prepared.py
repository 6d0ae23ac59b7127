"""Hot reads compiled once and run on the driver's cursor of the session's connection.

Why: a SELECT sent through a SQLAlchemy session costs about 0.2 ms of CPU more than the same
statement on a psycopg cursor (the session's and the connection's execute, the compiled-cache
lookup, the execution context, the result object and its rows), more than PostgreSQL's own work
for a page of a hot list.
A ``Prepared`` compiles its select once per dialect and learns its columns' conversions on its
first run, then only binds, executes and converts what needs it (timezone-aware datetimes).

It runs on the session's own connection, so inside the session's transaction (or its
autocommit) and under a test's outer transaction; ``before_cursor_execute`` listeners hear it as
they hear SQLAlchemy's statements, and a driver error goes through SQLAlchemy's own handling
(wrapped in ``sqlalchemy.exc.DBAPIError``, a lost connection invalidated). On SQLite, the
embedded default, the select runs through the session as any other.

A ``PreparedInsert`` does the same for an INSERT of one row: the row a write adds costs what
the statement costs, not a unit of work's flush of an object nobody reads back. No flush sees
that row, so what watches a session's flushes for new rows (the usage ledger, kept figures,
the principal cache) hears of it through ``on_row_inserted``.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ARRAY,
    Column,
    ColumnElement,
    Connection,
    Select,
    Table,
    any_,
    bindparam,
    insert,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import QueryableAttribute, Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.sql.visitors import InternalTraversal
from sqlalchemy.types import TypeEngine

from app.database.core import REFUSAL, ReadOnlySession, ReadOnlyViolation

Processor = Callable[[Any], Any]
RowInserted = Callable[[Session, Table, Any], None]

FAST_DIALECTS = ("postgresql",)


@dataclass
class _Plan:
    compiled: SQLCompiler
    sql: str
    bind_processors: Mapping[str, Processor]
    row: Callable[[Sequence[Any]], Any]
    types: tuple[TypeEngine[Any], ...]
    # Per column, from the first run's cursor description (the types the server answers in).
    result_processors: tuple[tuple[int, Processor], ...] | None = None


class Prepared:
    """A select built once, its values named with ``bindparam``, run as ``rows(db, values)``;
    each row reads as a tuple and by column name, like SQLAlchemy's. A select of entities runs
    through the session, which builds them."""

    def __init__(self, query: Select[*tuple[Any, ...]]) -> None:
        self.query = query
        self.plain = _plain_columns(query)
        self._row = _row_maker(tuple(query.selected_columns.keys()) if self.plain else ())
        self._plans: dict[str, _Plan | None] = {}

    def rows(self, db: Session, values: Mapping[str, Any] | None = None) -> list[Any]:
        if db.autoflush:  # as the session's own execute does: its pending changes are seen
            db.flush()
        connection = db.connection()
        dialect = connection.dialect
        plan = self._plans[dialect.name] if dialect.name in self._plans else self._plan(dialect)
        if plan is None:
            return list(db.execute(self.query, dict(values or {})).all())
        return _run(connection, plan, values or {}, fetch=True)

    def _plan(self, dialect: Dialect) -> _Plan | None:
        """None: the session runs it (on SQLite; a select of entities; a parameter expanded or
        rendered into the SQL on each run, e.g. an ``IN`` list)."""
        plan = self._compiled(dialect) if self.plain and dialect.name in FAST_DIALECTS else None
        self._plans[dialect.name] = plan
        return plan

    def _compiled(self, dialect: Dialect) -> _Plan | None:
        compiled = self.query.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        if compiled.literal_execute_params or compiled.post_compile_params:
            return None
        processors = _bind_processors(compiled, dialect)
        return _Plan(compiled, compiled.string, processors, self._row,
                     tuple(column.type for column in self.query.selected_columns))


_row_inserted: list[RowInserted] = []


def on_row_inserted(listener: RowInserted) -> RowInserted:
    """``listener(session, table, row)`` is called after each ``PreparedInsert``, in the
    session's transaction, with the row as returned (None for an insert returning nothing)."""
    _row_inserted.append(listener)
    return listener


class PreparedInsert:
    """An INSERT of one row into ``table``, compiled once per dialect, run as
    ``add(db, values)``: the ``returning`` columns of the row added (None without them). A column
    left out gets its Python default, as SQLAlchemy would give it; a column with only a server
    default is left to the server, and cannot be given. Refused in a read-only session.

    ``statement_for`` makes the INSERT for a dialect where it is more than a plain one (e.g.
    an upsert, which each dialect spells its own way)."""

    def __init__(self, table: Table, returning: Sequence[Column[Any]] = (),
                 statement_for: Callable[[Dialect], Insert] | None = None) -> None:
        self.table = table
        self.returning = tuple(returning)
        self._statement_for = statement_for or (lambda _dialect: insert(table))
        self._statements: dict[str, Insert] = {}
        self.columns = tuple(c for c in table.columns if _given_on_insert(c))
        self._defaults = tuple((c.key, _python_default(c)) for c in self.columns)
        self._keys = frozenset(c.key for c in self.columns)
        self._row = _row_maker(tuple(c.key for c in self.returning))
        self._plans: dict[str, _Plan | None] = {}

    def add(self, db: Session, values: Mapping[str, Any]) -> Any:
        if isinstance(db, ReadOnlySession):
            raise ReadOnlyViolation(REFUSAL)
        if unknown := set(values) - self._keys:
            raise ValueError(f"{self.table.name} has no column {sorted(unknown)} to give on "
                             "insert")
        db.flush()  # what the session holds goes first: the row may refer to it
        connection = db.connection()
        dialect = connection.dialect
        plan = self._plans[dialect.name] if dialect.name in self._plans else self._plan(dialect)
        if plan is None:
            result = db.execute(self._statement(dialect), dict(values))
            row = result.one() if self.returning else None
        else:
            rows = _run(connection, plan, self._completed(values), fetch=bool(self.returning))
            row = rows[0] if rows else None
        for listener in _row_inserted:
            listener(db, self.table, row)
        return row

    def _statement(self, dialect: Dialect) -> Insert:
        if dialect.name not in self._statements:
            statement = self._statement_for(dialect)
            self._statements[dialect.name] = (statement.returning(*self.returning)
                                              if self.returning else statement)
        return self._statements[dialect.name]

    def _completed(self, values: Mapping[str, Any]) -> dict[str, Any]:
        completed = dict(values)
        for key, default in self._defaults:
            if key not in completed:
                completed[key] = default() if callable(default) else default
        return completed

    def _plan(self, dialect: Dialect) -> _Plan | None:
        if dialect.name not in FAST_DIALECTS:
            self._plans[dialect.name] = None
            return None
        compiled = self._statement(dialect).compile(dialect=dialect,
                                                    column_keys=[c.key for c in self.columns])
        assert isinstance(compiled, SQLCompiler)
        processors = _bind_processors(compiled, dialect)
        plan = _Plan(compiled, compiled.string, processors, self._row,
                     tuple(column.type for column in self.returning))
        self._plans[dialect.name] = plan
        return plan


def _given_on_insert(column: Column[Any]) -> bool:
    """Not a generated key, and not a column only the server fills."""
    generated_key = column.primary_key and column is column.table._autoincrement_column
    return not generated_key and not (column.default is None and column.server_default)


def _python_default(column: Column[Any]) -> Any:
    """A constant, a function of no arguments, or None (NULL)."""
    default = column.default
    if default is None:
        return None
    if not default.is_scalar and not default.is_callable:
        raise ValueError(f"{column}: a {type(default).__name__} default is not supported")
    arg = default.arg  # type: ignore[attr-defined]
    return (lambda: arg(None)) if default.is_callable else arg


class OneOf(ColumnElement[bool]):
    """``column IN (values)``, the values a list bound as ``name``: on PostgreSQL one array
    parameter (``= ANY``), which a ``Prepared`` sends as it is; elsewhere SQLAlchemy's
    expanding ``IN``, rendered afresh for each list's length."""

    inherit_cache = True
    _traverse_internals = [("column", InternalTraversal.dp_clauseelement),
                           ("name", InternalTraversal.dp_string)]

    def __init__(self, column: ColumnElement[Any] | QueryableAttribute[Any], name: str) -> None:
        self.column = column
        self.name = name


@compiles(OneOf)
def _one_of_in(element: OneOf, compiler: Any, **kw: Any) -> str:
    expanding = element.column.in_(bindparam(element.name, expanding=True))
    rendered: str = compiler.process(expanding, **kw)
    return rendered


@compiles(OneOf, "postgresql")
def _one_of_array(element: OneOf, compiler: Any, **kw: Any) -> str:
    array = bindparam(element.name, type_=ARRAY(element.column.type))
    rendered: str = compiler.process(element.column == any_(array), **kw)
    return rendered


def _row_maker(names: tuple[str, ...]) -> Callable[[Sequence[Any]], Any]:
    """Rows read by index, by attribute and through ``_mapping``, as SQLAlchemy's are."""
    fields: Any = namedtuple("PreparedFields", names)  # type: ignore[misc]

    class PreparedRow(fields):
        __slots__ = ()

        @property
        def _mapping(self) -> dict[str, Any]:
            return dict(zip(self._fields, self, strict=True))

    make: Callable[[Sequence[Any]], Any] = PreparedRow._make
    return make


def _bind_processors(compiled: SQLCompiler, dialect: Dialect) -> dict[str, Processor]:
    """Per parameter, the conversion to the driver's value: the dialect's own implementation
    of the type, as SQLAlchemy's execution uses (e.g. a JSON value wrapped for psycopg)."""
    found: dict[str, Processor] = {}
    for bind in compiled.binds.values():
        processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if processor is not None:
            found[_sent_name(compiled, bind)] = processor
    return found


def _sent_name(compiled: SQLCompiler, bind: BindParameter[Any]) -> str:
    """The parameter's name as ``construct_params`` gives it to the driver."""
    name = compiled.bind_names[bind]
    return compiled.escaped_bind_names.get(name, name)


def _plain_columns(query: Select[*tuple[Any, ...]]) -> bool:
    return all(isinstance(d["type"], TypeEngine) for d in query.column_descriptions)


def _run(connection: Connection, plan: _Plan, values: Mapping[str, Any],
         fetch: bool) -> list[Any]:
    params = plan.compiled.construct_params(dict(values))
    for name, processor in plan.bind_processors.items():
        params[name] = processor(params[name])
    listeners = connection.dispatch.before_cursor_execute
    cursor = connection.connection.cursor()
    try:
        if listeners:
            listeners(connection, cursor, plan.sql, params, None, False)
        cursor.execute(plan.sql, params)
        if not fetch:
            return []
        fetched = cursor.fetchall()
        if plan.result_processors is None:
            plan.result_processors = _result_processors(connection.dialect, plan,
                                                        cursor.description)
    except connection.dialect.loaded_dbapi.Error as error:
        # SQLAlchemy's own handling: the error wrapped, a lost connection invalidated.
        connection._handle_dbapi_exception(error, plan.sql, params, cursor, None)
        raise  # not reached: the handler raises
    finally:
        cursor.close()
    return _converted(fetched, plan)


def _result_processors(dialect: Dialect, plan: _Plan,
                       description: Sequence[Any]) -> tuple[tuple[int, Processor], ...]:
    found = []
    for index, (type_, column) in enumerate(zip(plan.types, description, strict=True)):
        processor = type_.dialect_impl(dialect).result_processor(dialect, column[1])
        if processor is not None:
            found.append((index, processor))
    return tuple(found)


def _converted(fetched: Sequence[Sequence[Any]], plan: _Plan) -> list[Any]:
    make = plan.row
    processors = plan.result_processors
    if not processors:
        return [make(row) for row in fetched]
    rows = []
    for fetched_row in fetched:
        row = list(fetched_row)
        for index, processor in processors:
            row[index] = processor(row[index])
        rows.append(make(row))
    return rows
