"""The portal's app with ``bench.lower_bound``'s probes in front of its routes (bench only)."""

from __future__ import annotations

import json
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from pydantic_core import to_json
from sqlalchemy import text
from starlette.types import ASGIApp, Receive, Scope, Send

from app.database.core import Database
from app.http import hop
from app.http.health import PROBE_PATHS
from app.http.middleware import AnswerStampMiddleware
from app.kit.logs import AccessLog
from app.process.asgi import create_app
from app.process.preflight import settings_or_exit
from app.process.serving import UVICORN_OPTIONS, settle_heap
from bench.lower_bound import MINIMAL, MINIMAL_READY, PROBES
from bench.twin_app import add_twins

# The write probe's own table, in the benchmark's database only.
CREATE_WRITES = ("CREATE TABLE IF NOT EXISTS bench_probe_writes (id bigserial PRIMARY KEY, "
                 "body jsonb NOT NULL, at timestamptz NOT NULL DEFAULT now())")
INSERT_WRITE = "INSERT INTO bench_probe_writes (body) VALUES (%(body)s) RETURNING id"


def add_probes(app: FastAPI, database: Database, database_url: str) -> None:
    def fetch(statement: str, values: dict[str, Any],
              commit: bool = False) -> tuple[list[str], list[tuple[Any, ...]]]:
        connection = database.engine.raw_connection()
        try:
            cursor = connection.driver_connection.cursor()  # type: ignore[union-attr]
            cursor.execute(statement, values)
            names = [column.name for column in cursor.description or []]
            rows = cursor.fetchall() if cursor.description else []
            if commit:
                connection.commit()
            return names, rows
        finally:
            connection.close()

    fetch(CREATE_WRITES, {}, commit=True)

    async def constant() -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    async def select_one() -> Response:
        _, rows = await hop.run_sync(fetch, "SELECT 1", {})
        return Response(json.dumps(rows).encode(), media_type="application/json")

    async def insert(request: Request) -> Response:
        body = await request.body()
        _, rows = await hop.run_sync(
            fetch, INSERT_WRITE,
            {"body": body.decode()}, True)
        return Response(to_json({"id": rows[0][0]}), status_code=201,
                        media_type="application/json")

    for path, endpoint, method in (
            (f"{PROBES}/async", constant, "GET"), (f"{PROBES}/select1", select_one, "GET"),
            (f"{PROBES}/insert", insert, "POST")):
        app.add_api_route(path, endpoint, methods=[method], include_in_schema=False)
    added = 3 + add_twins(app, database, database_url)
    routes = app.router.routes
    probes = [route for route in routes[:-added]
              if getattr(route, "path", "") in PROBE_PATHS]  # still first, as in the portal
    routes[:] = probes + routes[-added:] + [r for r in routes[:-added] if r not in probes]


def minimal_app(database: Database) -> ASGIApp:
    """FastAPI's minimal async endpoint behind the middlewares every answer must pass: the
    request id with the access line, and the security headers (what ``/healthz`` and
    ``/readyz`` are held to)."""
    minimal = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    @minimal.get(MINIMAL)
    async def ok() -> dict[str, str]:
        return {"status": "ok"}

    @minimal.get(MINIMAL_READY)
    async def ready() -> dict[str, str]:  # what /readyz must do: a hop and SELECT 1
        await hop.run_sync(_select_one, database)
        return {"status": "ok", "database": "ok"}

    return AnswerStampMiddleware(minimal, access=AccessLog())


def _select_one(database: Database) -> None:
    with database.engine.connect() as connection:
        connection.execute(text("SELECT 1"))


def beside(portal: ASGIApp, minimal: ASGIApp) -> ASGIApp:
    """The portal, and the minimal app on its own paths."""

    async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in (MINIMAL, MINIMAL_READY):
            await minimal(scope, receive, send)
        else:
            await portal(scope, receive, send)

    return dispatch


def serve(port: int) -> None:
    settings = settings_or_exit()
    app = create_app(settings)
    add_probes(app, app.state.database, settings.database_url)
    settle_heap()
    uvicorn.run(beside(app, minimal_app(app.state.database)), host="127.0.0.1", port=port,
                **UVICORN_OPTIONS)  # as under `portal serve`: the app writes the access line
