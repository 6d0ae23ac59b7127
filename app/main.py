"""The ASGI application: routers, middleware and error rendering."""

from __future__ import annotations

import logging
from datetime import timedelta
from http import HTTPStatus
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, RedirectResponse, Response

from app.auth import api as auth_api
from app.auth import web as auth_web
from app.auth.oidc import make_oauth
from app.auth.sessions import ServerSideSessionMiddleware, SessionPolicy, SessionStore
from app.config import Settings, get_settings
from app.db import Database
from app.errors import PROBLEM_JSON, ProblemError, ValidationFailed
from app.health import router as health_router
from app.middleware import RequestIdMiddleware, SecurityHeadersMiddleware
from app.web import home
from app.web.templating import STATIC_DIR, render

log = logging.getLogger(__name__)

API_ROUTERS = [auth_api.router]
WEB_ROUTERS = [home.router, auth_web.router]


def all_routers() -> list[APIRouter]:
    return [health_router, *API_ROUTERS, *WEB_ROUTERS]


def create_app(settings: Settings | None = None, database: Database | None = None) -> FastAPI:
    settings = settings or get_settings()
    database = database or Database(settings.database_url)
    app = FastAPI(
        title="GPU Tenant Portal",
        version="0.1.0",
        description="Tenants, GPU quota, dedicated GPU nodes and virtual clusters.",
    )
    app.state.settings = settings
    app.state.database = database
    app.state.oauth = make_oauth(settings)
    policy = SessionPolicy(
        idle=timedelta(minutes=settings.session_idle_minutes),
        absolute=timedelta(hours=settings.session_absolute_hours),
    )
    store = SessionStore(database, policy)
    app.add_middleware(ServerSideSessionMiddleware, store_factory=lambda: store)
    app.add_middleware(SecurityHeadersMiddleware)
    app.add_middleware(RequestIdMiddleware)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    for router in all_routers():
        app.include_router(router)
    _add_error_handlers(app)
    return app


def _wants_problem_json(request: Request) -> bool:
    return request.url.path.startswith("/api/") or "text/html" not in request.headers.get(
        "accept", ""
    )


def _problem_response(request: Request, error: ProblemError) -> Response:
    if _wants_problem_json(request):
        body = error.to_problem(request.url.path, getattr(request.state, "request_id", ""))
        headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
        return JSONResponse(body, status_code=error.status, media_type=PROBLEM_JSON,
                            headers=headers)
    if error.status == 401:
        return RedirectResponse(f"/auth/login?next={quote(request.url.path)}", status_code=303)
    return render(request, "error.html", {"title": error.title, "detail": error.detail},
                  status_code=error.status)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ProblemError)
    async def handle_problem(request: Request, error: ProblemError) -> Response:
        return _problem_response(request, error)

    @app.exception_handler(RequestValidationError)
    async def handle_validation(request: Request, error: RequestValidationError) -> Response:
        fields = [
            {"field": ".".join(str(p) for p in e["loc"] if p != "body"), "message": e["msg"]}
            for e in error.errors()
        ]
        return _problem_response(request, ValidationFailed("the request is invalid",
                                                           errors=fields))

    @app.exception_handler(StarletteHTTPException)
    async def handle_http(request: Request, error: StarletteHTTPException) -> Response:
        title = HTTPStatus(error.status_code).phrase
        problem = ProblemError.with_status(error.status_code, title, str(error.detail))
        return _problem_response(request, problem)

    @app.exception_handler(Exception)
    async def handle_unexpected(request: Request, error: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        problem = ProblemError.with_status(
            500, "Internal server error", "an unexpected error occurred; quote the request id"
        )
        return _problem_response(request, problem)
