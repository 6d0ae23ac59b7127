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
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ARRAY, ColumnElement, Connection, Select, any_, bindparam
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import QueryableAttribute, Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.sql.visitors import InternalTraversal
from sqlalchemy.types import TypeEngine

Processor = Callable[[Any], Any]

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
        return _run(connection, plan, values or {})

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
        processors = {_sent_name(compiled, bind): processor for bind in compiled.binds.values()
                      if (processor := bind.type.bind_processor(dialect)) is not None}
        return _Plan(compiled, compiled.string, processors, self._row,
                     tuple(column.type for column in self.query.selected_columns))


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


def _sent_name(compiled: SQLCompiler, bind: BindParameter[Any]) -> str:
    """The parameter's name as ``construct_params`` gives it to the driver."""
    name = compiled.bind_names[bind]
    return compiled.escaped_bind_names.get(name, name)


def _plain_columns(query: Select[*tuple[Any, ...]]) -> bool:
    return all(isinstance(d["type"], TypeEngine) for d in query.column_descriptions)


def _run(connection: Connection, plan: _Plan, values: Mapping[str, Any]) -> list[Any]:
    params = plan.compiled.construct_params(dict(values))
    for name, processor in plan.bind_processors.items():
        params[name] = processor(params[name])
    listeners = connection.dispatch.before_cursor_execute
    cursor = connection.connection.cursor()
    try:
        if listeners:
            listeners(connection, cursor, plan.sql, params, None, False)
        cursor.execute(plan.sql, params)
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
        processor = type_.result_processor(dialect, column[1])
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
