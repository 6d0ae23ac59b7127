"""Raw twins of the real endpoints, in ``bench.lower_bound``'s server only.

A twin is made from one real request: while it runs, every statement the app sends to
PostgreSQL (SQLAlchemy's ``before_cursor_execute``, with its parameters as the driver got them),
whether it commits, and the page template it renders (with its context) are recorded. The twin
then replays those statements on a raw psycopg connection of its own (autocommit for a read, one
transaction and its ``COMMIT`` for a write), turns every row into a dict, and encodes the real
answer's value with pydantic-core (JSON) or renders the same template with the same context
(HTML). No authentication, authorization, ORM, response model or dependency injection: what the
same statements and the same bytes cost at the least behind uvicorn and FastAPI's routing.

For a write, the bench renders the real request's ``{u}`` as a marker; the twin puts its own
``{u}`` (the last path segment) wherever the marker was in the parameters and in the answer, so
names stay unique.
"""

from __future__ import annotations

import difflib
import queue
import secrets
import string
import threading
from dataclasses import dataclass, field, replace
from typing import Any

import jinja2
import psycopg
from fastapi import FastAPI, Request, Response
from psycopg.types.json import set_json_loads
from pydantic_core import from_json, to_json
from sqlalchemy import event

from app.database.core import Database
from app.http import hop
from bench.lower_bound import PROBES
from bench.seed import psycopg_url

Statement = tuple[str, Any, bool]  # SQL, its parameters, executemany


@dataclass
class Recording:
    statements: list[Statement] = field(default_factory=list)
    commits: int = 0
    renders: list[tuple[jinja2.Template, dict[str, Any], str]] = field(default_factory=list)


@dataclass(frozen=True)
class Twin:
    statements: tuple[Statement, ...]
    commits: bool
    media_type: str
    status: int
    marker: str
    generated: frozenset[tuple[int, Any]] = frozenset()  # (statement, parameter) made afresh
    value: Any = None  # the JSON answer's value
    template: jinja2.Template | None = None
    context: dict[str, Any] | None = None


class Recorder:
    """What the app does for one request; the bench records one at a time, with no load."""

    def __init__(self) -> None:
        self.current: Recording | None = None
        self.lock = threading.Lock()

    def statement(self, _conn: Any, _cursor: Any, statement: str, parameters: Any,
                  _context: Any, executemany: bool) -> None:
        if self.current is not None:
            self.current.statements.append((statement, parameters, executemany))

    def commit(self, _conn: Any) -> None:
        if self.current is not None:
            self.current.commits += 1

    def render(self, template: jinja2.Template, context: dict[str, Any], output: str) -> None:
        if self.current is not None:
            self.current.renders.append((template, dict(context), output))


RECORDER = Recorder()
_render = jinja2.Template.render


def _recorded_render(self: jinja2.Template, *args: Any, **kwargs: Any) -> str:
    output = _render(self, *args, **kwargs)
    if RECORDER.current is not None and args and isinstance(args[0], dict):
        RECORDER.render(self, args[0], output)
    return output


class Connections:
    """Raw psycopg connections, reads in autocommit, writes in transactions."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.idle: dict[bool, queue.LifoQueue[psycopg.Connection[Any]]] = {
            True: queue.LifoQueue(), False: queue.LifoQueue()}

    def get(self, autocommit: bool) -> psycopg.Connection[Any]:
        try:
            return self.idle[autocommit].get_nowait()
        except queue.Empty:
            connection = psycopg.connect(self.url, autocommit=autocommit)
            set_json_loads(from_json, connection)  # as the app's engine reads JSON columns
            return connection

    def put(self, connection: psycopg.Connection[Any]) -> None:
        self.idle[connection.autocommit].put(connection)


def _swapped(value: Any, marker: str, unique: str) -> Any:
    if isinstance(value, str):
        return value.replace(marker, unique)
    if isinstance(value, dict):
        return {k: _swapped(v, marker, unique) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_swapped(v, marker, unique) for v in value)
    return value


_HEX = frozenset(string.hexdigits)


def fresh(value: str) -> str:
    """A new value of the same length and alphabet (a token's hash, a random name)."""
    made = secrets.token_hex(len(value)) if set(value) <= _HEX else secrets.token_urlsafe(
        len(value))
    return made[:len(value)]


def generated_parameters(first: tuple[Statement, ...], second: tuple[Statement, ...],
                         marker: str, other: str) -> frozenset[tuple[int, Any]]:
    """The text parameters two runs of the same write made differently, its markers aside:
    values the endpoint generates (a token and its hash, a notification's uid) and a twin must
    generate too; by index in ``first``. The statements are paired by their SQL: a run may send
    one the other did not (a cache that expired in between reads its row again)."""
    matched = difflib.SequenceMatcher(a=[sql for sql, _, _ in first],
                                      b=[sql for sql, _, _ in second], autojunk=False)
    found = set()
    for block in matched.get_matching_blocks():
        for offset in range(block.size):
            index = block.a + offset
            (_, a, many), (_, b, _) = first[index], second[block.b + offset]
            if many or not isinstance(a, dict) or not isinstance(b, dict):
                continue
            found |= {(index, name) for name, value in a.items()
                      if isinstance(value, str) and marker not in value
                      and value.replace(marker, other) != b.get(name)}
    return frozenset(found)


def _parameters(twin: Twin, index: int, parameters: Any, unique: str) -> Any:
    values = _swapped(parameters, twin.marker, unique) if unique else parameters
    if twin.generated and isinstance(values, dict):
        made = {name for at, name in twin.generated if at == index}
        if made:
            values = {k: fresh(v) if k in made else v for k, v in values.items()}
    return values


def replay(connections: Connections, twin: Twin, unique: str) -> list[dict[str, Any]]:
    """The twin's statements; every row as a dict, as the cheapest mapping would make it."""
    connection = connections.get(autocommit=not twin.commits)
    rows: list[dict[str, Any]] = []
    try:
        cursor = connection.cursor()
        for index, (sql, parameters, many) in enumerate(twin.statements):
            values = _parameters(twin, index, parameters, unique)
            if many:
                cursor.executemany(sql, values)
            else:
                cursor.execute(sql, values)
            if cursor.description:
                names = [column.name for column in cursor.description]
                rows += [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        if twin.commits:
            connection.commit()
    except Exception:
        connection.rollback()
        raise
    finally:
        connections.put(connection)
    return rows


def encode(twin: Twin, unique: str) -> bytes:
    if twin.template is not None and twin.context is not None:
        return twin.template.render(twin.context).encode()
    value = _swapped(twin.value, twin.marker, unique) if unique else twin.value
    return to_json(value)


def make_twin(recording: Recording, real: dict[str, Any]) -> Twin:
    """From a recording and the real answer (``status``, ``media_type``, ``body``, ``marker``)."""
    body: str = real["body"]
    media_type: str = real["media_type"]
    template = context = None
    value: Any = None
    if media_type.startswith("text/html"):
        for candidate, candidate_context, output in recording.renders:
            if output == body:
                template, context = candidate, candidate_context
    elif body:
        value = from_json(body)
    return Twin(tuple(recording.statements), recording.commits > 0, media_type,
                int(real["status"]), str(real.get("marker", "")), value=value,
                template=template, context=context)


def add_twins(app: FastAPI, database: Database, database_url: str) -> int:
    """The recording and twin routes; returns how many routes it added."""
    event.listen(database.engine, "before_cursor_execute", RECORDER.statement)
    event.listen(database.engine, "commit", RECORDER.commit)
    jinja2.Template.render = _recorded_render  # type: ignore[method-assign]
    connections = Connections(psycopg_url(database_url))
    twins: dict[str, Twin] = {}

    async def record() -> Response:
        RECORDER.current = Recording()
        return Response(b"{}", media_type="application/json")

    async def recorded(key: str, request: Request) -> Response:
        """The real answer of the request just recorded. A second one (``again=marker``, the
        same write with another marker) tells which parameters the endpoint generates."""
        recording, RECORDER.current = RECORDER.current or Recording(), None
        real = from_json(await request.body())
        first = twins.get(key)
        if first is not None and real.get("again"):
            twin = twins[key] = replace(first, generated=generated_parameters(
                first.statements, tuple(recording.statements), first.marker, real["again"]))
        else:
            twin = twins[key] = make_twin(recording, real)
        summary = {"statements": len(twin.statements), "commits": twin.commits,
                   "rendered": twin.template is not None,
                   "generated": sorted(str(name) for _, name in twin.generated),
                   "sql": [sql for sql, _, _ in twin.statements]}
        return Response(to_json(summary), media_type="application/json")

    def answer(twin: Twin, unique: str) -> bytes:
        replay(connections, twin, unique)
        return encode(twin, unique)

    async def read_twin(key: str) -> Response:
        twin = twins[key]
        body = await hop.run_sync(answer, twin, "")
        return Response(body, status_code=twin.status, media_type=twin.media_type)

    async def write_twin(key: str, unique: str, request: Request) -> Response:
        twin = twins[key]
        from_json(await request.body() or b"null")  # the real endpoint parses its body too
        body = await hop.run_sync(answer, twin, unique)
        return Response(body, status_code=twin.status, media_type=twin.media_type)

    routes = (
        (f"{PROBES}/record", record, ["POST"]),
        (f"{PROBES}/recorded/{{key}}", recorded, ["POST"]),
        (f"{PROBES}/twin/{{key}}", read_twin, ["GET"]),
        (f"{PROBES}/twin/{{key}}/{{unique}}", write_twin, ["POST", "PUT", "PATCH", "DELETE"]),
    )
    for path, endpoint, methods in routes:
        app.add_api_route(path, endpoint, methods=methods, include_in_schema=False)
    return len(routes)
