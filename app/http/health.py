"""Liveness and readiness probes.

Orchestrators call them every few seconds on every replica, so they are async (no thread hop
for ``/healthz``) and answered behind the request id and the security headers only
(``app.process.asgi``): no session, CSRF, authentication, throttle or request guard, none of
which a probe without input, cookie or token needs.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from sqlalchemy import text
from starlette.responses import JSONResponse, Response

from app.database.core import Database
from app.http import hop

router = APIRouter(tags=["health"])
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
_OK = b'{"status":"ok"}'
_READY = b'{"status":"ok","database":"ok"}'
_STATUS: dict[int | str, dict[str, Any]] = {200: {"content": {"application/json": {
    "schema": {"type": "object", "additionalProperties": {"type": "string"}}}}}}


@router.get("/healthz", summary="Liveness", response_class=Response, responses=_STATUS)
async def healthz() -> Response:
    """Answers 200 while the process runs; no sign-in needed."""
    return Response(_OK, media_type="application/json")


@router.get("/readyz", summary="Readiness", response_class=JSONResponse, responses=_STATUS)
async def readyz(request: Request) -> Response:
    """Answers 200 when the database answers, 503 otherwise; no sign-in needed."""
    database: Database = request.app.state.database
    problem = await hop.run_sync(_database_problem, database)
    if problem is not None:
        return JSONResponse({"status": "unavailable", "database": problem}, status_code=503)
    return Response(_READY, media_type="application/json")


def _database_problem(database: Database) -> str | None:
    try:
        with database.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as error:  # any driver error means "not ready"
        return type(error).__name__
    return None
