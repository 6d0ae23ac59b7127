"""The portal's app with ``bench.lower_bound``'s probes in front of its routes (bench only)."""

from __future__ import annotations

import json
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from pydantic_core import to_json
from sqlalchemy import Integer, bindparam, select
from sqlalchemy.dialects import postgresql

from app.clusters.models import VirtualCluster
from app.clusters.repository import listed_rows_query
from app.database.core import Database
from app.http import hop
from app.process.asgi import create_app
from app.process.cli import _settings, settle_heap
from app.tenants.models import Tenant
from bench.lower_bound import PROBES

PAGE = 50
# The write probe's own table, in the benchmark's database only.
CREATE_WRITES = ("CREATE TABLE IF NOT EXISTS bench_probe_writes (id bigserial PRIMARY KEY, "
                 "body jsonb NOT NULL, at timestamptz NOT NULL DEFAULT now())")
INSERT_WRITE = "INSERT INTO bench_probe_writes (body) VALUES (%(body)s) RETURNING id"


def clusters_sql() -> str:
    """The clusters list's first page, as the PostgreSQL driver receives it."""
    query = (listed_rows_query(bindparam("tenant_id", type_=Integer))
             .order_by(VirtualCluster.id).limit(bindparam("page_limit", type_=Integer)))
    return str(query.compile(dialect=postgresql.psycopg.dialect()))  # type: ignore[no-untyped-call]


def add_probes(app: FastAPI, database: Database) -> None:
    with database.session() as db:
        tenant_ids = dict(db.execute(select(Tenant.slug, Tenant.id)).tuples().all())
    sql = clusters_sql()

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

    def page(slug: str) -> bytes:
        names, rows = fetch(sql, {"tenant_id": tenant_ids.get(slug, 0),
                                    "page_limit": PAGE + 1})
        items = [dict(zip(names, row, strict=True)) for row in rows[:PAGE]]
        return to_json({"items": items})

    async def clusters(tenant: str) -> Response:
        return Response(await hop.run_sync(page, tenant), media_type="application/json")

    async def insert(request: Request) -> Response:
        body = await request.body()
        _, rows = await hop.run_sync(
            fetch, INSERT_WRITE,
            {"body": body.decode()}, True)
        return Response(to_json({"id": rows[0][0]}), status_code=201,
                        media_type="application/json")

    for path, endpoint, method in (
            (f"{PROBES}/async", constant, "GET"), (f"{PROBES}/select1", select_one, "GET"),
            (f"{PROBES}/tenants/{{tenant}}/clusters", clusters, "GET"),
            (f"{PROBES}/insert", insert, "POST")):
        app.add_api_route(path, endpoint, methods=[method], include_in_schema=False)
    routes = app.router.routes
    routes[:] = routes[-4:] + routes[:-4]  # matched first, as the hot routers are


def serve(port: int) -> None:
    settings = _settings()
    app = create_app(settings)
    add_probes(app, app.state.database)
    settle_heap()
    uvicorn.run(app, host="127.0.0.1", port=port, log_config=None, proxy_headers=True)
