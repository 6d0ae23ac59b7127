"""Liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter, Request
from sqlalchemy import text
from starlette.responses import JSONResponse

from app.database.core import Database

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness")
def healthz() -> dict[str, str]:
    """Answers 200 while the process runs; no sign-in needed."""
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness")
def readyz(request: Request) -> JSONResponse:
    """Answers 200 when the database answers, 503 otherwise; no sign-in needed."""
    database: Database = request.app.state.database
    try:
        with database.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as error:  # any driver error means "not ready"
        return JSONResponse(
            {"status": "unavailable", "database": type(error).__name__}, status_code=503
        )
    return JSONResponse({"status": "ok", "database": "ok"})
