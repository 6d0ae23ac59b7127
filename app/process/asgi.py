"""The ASGI application: routers, middleware and error rendering."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from http import HTTPStatus
from urllib.parse import quote

from anyio import to_thread
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp

from app.audit import denials as denial_rows
from app.audit.denials import Denial, DenialLog
from app.auth import cli_login, token_api, token_web
from app.auth import web as auth_web
from app.auth.csrf import verify_api_csrf
from app.auth.oidc import make_oauth
from app.auth.principal_cache import ExpiringCache, PrincipalCache, listen_for_changes
from app.auth.sessions import ServerSideSessionMiddleware, SessionPolicy, SessionStore
from app.auth.throttle import FailedAuthThrottle, FailedAuthThrottleMiddleware, throttled_denial
from app.auth.tokens import bearer_secret
from app.authz.scoping import TenantHidden
from app.clusters import api as clusters_api
from app.clusters import web as clusters_web
from app.database.concurrency import contended, timed_out
from app.database.core import Database
from app.fleet import api as fleet_api
from app.fleet import web as fleet_web
from app.gpu_classes import api as gpu_classes_api
from app.gpu_classes import web as gpu_classes_web
from app.hosts import api as hosts_api
from app.hosts import web as hosts_web
from app.http import hop
from app.http.clients import client_address
from app.http.health import PROBE_PATHS
from app.http.health import router as health_router
from app.http.metrics import PATH as METRICS_PATH
from app.http.metrics import router as metrics_router
from app.http.middleware import (
    RETRY_AFTER_SECONDS,
    AnswerStampMiddleware,
    BodyLimits,
    ControlCharacterGuardMiddleware,
    LoadSheddingMiddleware,
    ProbeBypass,
    too_deeply_nested,
)
from app.http.problems import PortalApi, problems
from app.kit.config import Settings, get_settings
from app.kit.errors import (
    PROBLEM_JSON,
    Conflict,
    Forbidden,
    ProblemError,
    ServiceUnavailable,
    TooManyRequests,
    Unauthenticated,
    ValidationFailed,
)
from app.kit.logs import AccessLog
from app.kit.metrics import HttpMetrics
from app.kit.validation_messages import api_field_error
from app.kube.connector import ClientConnector, KubeConnector
from app.kubeconfigs import api as kubeconfigs_api
from app.kubeconfigs import web as kubeconfigs_web
from app.machines import api as machines_api
from app.machines import web as machines_web
from app.nodes import api as nodes_api
from app.nodes import web as nodes_web
from app.notifications import endpoints_api as webhooks_api
from app.notifications import endpoints_web as webhooks_web
from app.notifications import preference_api, preference_web
from app.pages import audit_api as audit_api
from app.pages import audit_web as audit_web
from app.pages import dashboard, home
from app.pages import limits as limits_api
from app.process.capacity import SPARE_CONNECTIONS, web_time_limits
from app.process.wiring import connect_hooks
from app.quotas import api as quotas_api
from app.quotas import web as quotas_web
from app.templates import api as templates_api
from app.templates import web as templates_web
from app.templates.catalog import TemplateCatalog
from app.tenants import api as tenants_api
from app.tenants import group_mappings, me_api
from app.tenants import web as tenants_web
from app.tenants.access import cache_tenants
from app.usage import api as usage_api
from app.usage import web as usage_web
from app.utilisation import api as utilisation_api
from app.utilisation import web as utilisation_web
from app.web import api_docs, live
from app.web.favicon import router as favicon_router
from app.web.forms import is_htmx, with_toast
from app.web.templating import STATIC_DIR, render, templates

log = logging.getLogger(__name__)

API_ROUTERS = [me_api.router, token_api.router, group_mappings.router, audit_api.router,
               tenants_api.router, quotas_api.router, gpu_classes_api.router,
               kubeconfigs_api.router, kubeconfigs_api.grants_router,
               nodes_api.router,
               clusters_api.router, clusters_api.power_router, templates_api.router,
               templates_api.cluster_router,
               usage_api.router, hosts_api.router, machines_api.router, fleet_api.router,
               limits_api.router, utilisation_api.router, preference_api.router,
               webhooks_api.router]
WEB_ROUTERS = [home.router, auth_web.router, token_web.router, cli_login.router,
               audit_web.router,
               dashboard.router, tenants_web.router, quotas_web.router, gpu_classes_web.router,
               kubeconfigs_web.router,
               nodes_web.router,
               clusters_web.router, templates_web.router, usage_web.router, hosts_web.router,
               machines_web.router, fleet_web.router, utilisation_web.router,
               preference_web.router, webhooks_web.router, api_docs.router]



API_DESCRIPTION = """\
Tenants, GPU quota, dedicated GPU nodes and virtual clusters, as the portal's pages and
`portalctl` use them.

**Signing in.** Scripts send an API token as `Authorization: Bearer <token>`; make one on the
API tokens page (`/tokens`), with `portalctl tokens create`, or as an operator with
`portal tokens create EMAIL`. A browser signed in with SSO is also accepted (its session
cookie); its state changes need the session's `X-CSRF-Token` header. Use "Authorize" here to try
operations with a token.

**Errors** are `application/problem+json` (RFC 9457): `title`, `status`, a `detail` to read,
the `request_id` to quote, and for a 422 the invalid fields in `errors`. A tenant you may not
see answers 404, as one that does not exist.

**Lists** are pages: `?limit=` (at most 200) and the `next_cursor` of the last page as
`?cursor=`. **Creates** take an `Idempotency-Key` header: the same key and body again replay the
first answer instead of creating twice.

```sh
curl -H "Authorization: Bearer $PORTAL_TOKEN" https://portal.example.com/api/v1/me
```
"""

# Every API route: a cookie-authenticated state change must come with the CSRF header.
API_GUARDS = [Depends(verify_api_csrf)]


# Matched first, in this order: FastAPI tries a request against each route in turn, at about ten
# Python calls a route, and a route of the last router was the 116th. No path matches routes of
# two routers (tests/test_route_order.py), so the order decides nothing but this cost.
HOT_ROUTERS = [audit_api.router, me_api.router, nodes_api.router, clusters_api.router,
               quotas_api.router, tenants_api.router, token_api.router,
               dashboard.router, clusters_web.router, nodes_web.router, tenants_web.router,
               quotas_web.router, audit_web.router]


def all_routers() -> list[APIRouter]:
    rest = [r for r in [*API_ROUTERS, *WEB_ROUTERS] if r not in HOT_ROUTERS]
    return [health_router, metrics_router, favicon_router, *HOT_ROUTERS, *rest]


# Where a host cluster's credentials are uploaded (API and pages): these bodies may reach
# PORTAL_MAX_UPLOAD_BYTES, every other one PORTAL_MAX_BODY_BYTES.
CREDENTIAL_UPLOADS = re.compile(r"/(api/v1/host-clusters|admin/hosts)(/[^/]+/credentials)?/?$")


class _Portal(PortalApi):
    """The request id (with the access log) and the security headers wrap the whole stack,
    Starlette's outermost ServerErrorMiddleware included: every answer carries them, the 500 of
    an unexpected error and the middlewares' own 413, 422 and 503 as much as the routes'. The
    health probes skip the portal's own middlewares (``ProbeBypass``)."""

    def build_middleware_stack(self) -> ASGIApp:
        return AnswerStampMiddleware(ProbeBypass(
            super().build_middleware_stack(), self._probes(), PROBE_PATHS | {METRICS_PATH}),
            access=AccessLog(), metrics=self.state.metrics)

    def _probes(self) -> FastAPI:
        """The health probes and the metrics in an app of their own (FastAPI's error handling,
        their routes) sharing this one's state: matched without walking the portal's
        routers."""
        probes = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
        probes.router.routes.extend([*health_router.routes, *metrics_router.routes])
        probes.state = self.state
        probes.exception_handlers.update(self.exception_handlers)
        return probes


def create_app(
    settings: Settings | None = None,
    database: Database | None = None,
    kube: KubeConnector | None = None,
    serving: bool = False,
) -> FastAPI:
    """``serving``: one of `portal serve`'s processes, which hears the others' changes."""
    settings = settings or get_settings()
    database = database or Database(settings.database_url, web_time_limits(settings),
                                    **_pool_for(settings))
    connect_hooks()
    app = _Portal(
        lifespan=_lifespan(settings.web_threads, database if serving else None),
        # Not wired to a collector: FastAPI's own OpenTelemetry hooks would only cost time.
        telemetry={"tracing": False, "metrics": False, "logs": False},
        title="GPU Tenant Portal",
        version="0.1.0",
        description=API_DESCRIPTION,
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.metrics = HttpMetrics()
    app.state.database = database
    app.state.oauth = make_oauth(settings)
    app.state.kube = kube or ClientConnector(settings)
    app.state.principals = PrincipalCache(settings.auth_cache_seconds)
    app.state.auth_throttle = FailedAuthThrottle(settings.auth_failures_per_minute)
    app.state.denials = DenialLog(settings.audit_denial_window_seconds)
    cache_tenants(database, settings.auth_cache_seconds)
    # Deployed templates do not change: no stat() of each template file on every render.
    templates.env.auto_reload = settings.env != "production"
    # Cluster creation goes through templates without the clusters domain importing them.
    app.state.template_resolver = TemplateCatalog()
    policy = SessionPolicy(
        idle=timedelta(minutes=settings.session_idle_minutes),
        absolute=timedelta(hours=settings.session_absolute_hours),
    )
    store = SessionStore(database, policy, cache=ExpiringCache(settings.auth_cache_seconds))
    app.add_middleware(ServerSideSessionMiddleware, store_factory=lambda: store,
                       always_secure=settings.env == "production")
    # Outside the session (a throttled caller costs no session lookup), inside the headers.
    app.add_middleware(FailedAuthThrottleMiddleware, throttle=app.state.auth_throttle,
                       denials=app.state.denials)
    app.add_middleware(LoadSheddingMiddleware, limit=settings.web_max_in_flight,
                       exempt=("/healthz", "/readyz", "/static/", "/favicon.ico",
                               f"{live.PREFIX}/"))
    app.add_middleware(ControlCharacterGuardMiddleware, limits=BodyLimits(
        default=settings.max_body_bytes,
        upload=max(settings.max_upload_bytes, settings.max_body_bytes),
        upload_paths=CREDENTIAL_UPLOADS))
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    for router in all_routers():
        if router in API_ROUTERS:
            app.include_router(router, dependencies=API_GUARDS, responses=problems(401))
        else:
            app.include_router(router)
    _add_error_handlers(app)
    return app


def _pool_for(settings: Settings) -> dict[str, int]:
    """A connection for every worker thread and a few spare: connections are held only within
    a thread's hop, so nobody waits long for one; past the timeout the caller gets a 503."""
    if settings.is_sqlite:
        return {}
    return {"pool_size": settings.web_threads, "max_overflow": SPARE_CONNECTIONS,
            "pool_timeout": 5}


def _lifespan(threads: int, database: Database | None
              ) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Sync endpoints run on ``threads`` threads (anyio's default is 40; more only contend for
    the GIL and for database connections). Counted denials are written as their windows close,
    and all of them when the process stops. Given a ``database``, the process hears of other
    processes' changes to callers while it serves."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        to_thread.current_default_thread_limiter().total_tokens = threads
        generation = hop.set_threads(threads, threads + SPARE_CONNECTIONS)
        flusher = asyncio.create_task(_flush_denials(app)) if _may_flush_meanwhile(app) else None
        listener = listen_for_changes(database) if database is not None else None
        try:
            yield
        finally:
            if listener is not None:
                listener.stop()
            if flusher is not None:
                flusher.cancel()
                await asyncio.gather(flusher, return_exceptions=True)
            _write_denials(app, app.state.denials.drain())
            hop.stop(generation)

    return lifespan


def _may_flush_meanwhile(app: FastAPI) -> bool:
    """A timer's writes on a database that is one shared connection would interleave their
    savepoints with a request's; there a closed window is written by the next denial (as
    everywhere) or when the process stops."""
    database: Database = app.state.database
    return not database.shares_one_connection


async def _flush_denials(app: FastAPI) -> None:
    denials: DenialLog = app.state.denials
    while True:
        await asyncio.sleep(denials.window_seconds)
        tallies = denials.due()
        if tallies:
            await hop.run_sync(_write_denials, app, tallies)


def _write_denials(app: FastAPI, tallies: list[denial_rows.Tally]) -> None:
    if not tallies:
        return
    try:
        denial_rows.write(app.state.database, tallies)
    except Exception:
        log.exception("%d counted denied requests could not be written to the audit log",
                      sum(tally.count for tally in tallies))


def _wants_problem_json(request: Request) -> bool:
    return request.url.path.startswith("/api/") or "text/html" not in request.headers.get(
        "accept", ""
    )


def _problem_response(request: Request, error: ProblemError) -> Response:
    response = _problem_body(request, error)
    if is_htmx(request) and not request.url.path.startswith("/api/"):
        # htmx swaps no error answer (base.html's responseHandling) but runs its HX-Trigger:
        # the refusal is told in the page's toast region instead of nothing happening.
        with_toast(response, error.detail)
    return response


def _problem_body(request: Request, error: ProblemError) -> Response:
    if _wants_problem_json(request):
        body = error.to_problem(request.url.path, getattr(request.state, "request_id", ""))
        headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
        return JSONResponse(body, status_code=error.status, media_type=PROBLEM_JSON,
                            headers=headers)
    if error.status == 401:
        return RedirectResponse(f"/auth/login?next={quote(request.url.path)}", status_code=303)
    return render(request, "error.html", {"title": error.title, "detail": error.detail},
                  status_code=error.status)


async def _audit_denial(request: Request, error: ProblemError) -> None:
    """Failed authorizations are audited in their own transaction (the request's rolled back),
    the first of a kind at once and the window's others counted (``app.audit.denials``): a
    counted one costs no thread hop and no database."""
    actor: tuple[int, str] | None = getattr(request.state, "actor", None)
    anonymous = actor is None and bearer_secret(request.scope) is None
    if isinstance(error, Unauthenticated) and anonymous:
        return  # plain anonymous visits are not worth an audit row each
    denials: DenialLog = request.app.state.denials
    denial = _denial_of(request, error, actor)
    first = denial if denials.admit(denial) else None
    tallies = denials.due()
    if first is not None or tallies:
        await hop.run_sync(denial_rows.write, request.app.state.database, tallies, first)


def _denial_of(request: Request, error: ProblemError, actor: tuple[int, str] | None) -> Denial:
    route = getattr(request.scope.get("route"), "path", request.url.path)
    who = actor[1] if actor else f"anonymous ({client_address(request.scope)})"
    return Denial(status=error.status, who=who, actor_id=actor[0] if actor else None,
                  route=f"{request.method} {route}",
                  path=f"{request.method} {request.url.path}", detail=error.detail)


def _busy_response(request: Request, error: DBAPIError) -> Response:
    """A row another request held past the lock timeout (or a deadlock lost): 409, as any
    conflicting write; a statement past the statement timeout: 503. Both may be retried."""
    log.warning("%s on %s %s: %s", "contended row" if contended(error) else "statement timeout",
                request.method, request.url.path, type(error.orig).__name__)
    problem: ProblemError = (
        Conflict("another change to the same object is in progress; retry after the "
                 "Retry-After delay") if contended(error)
        else ServiceUnavailable("the database took too long; retry after the Retry-After delay"))
    response = _problem_response(request, problem)
    response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ProblemError)
    async def handle_problem(request: Request, error: ProblemError) -> Response:
        if isinstance(error, Forbidden | TenantHidden | Unauthenticated):
            await _audit_denial(request, error)
        response = _problem_response(request, error)
        if isinstance(error, TooManyRequests):
            request.app.state.denials.count_only(throttled_denial(request.scope))
            response.headers["Retry-After"] = str(error.retry_after)
        return response

    @app.exception_handler(RequestValidationError)
    async def handle_validation(request: Request, error: RequestValidationError) -> Response:
        fields = [api_field_error(e) for e in error.errors()]
        unparsed = any(e["type"] == "json_invalid" for e in error.errors())
        detail = "the request body is not valid JSON" if unparsed else "the request is invalid"
        return _problem_response(request, ValidationFailed(detail, errors=fields))

    @app.exception_handler(StarletteHTTPException)
    async def handle_http(request: Request, error: StarletteHTTPException) -> Response:
        if isinstance(error.__cause__, RecursionError):  # FastAPI's JSON parsing gave up
            return _problem_response(request, too_deeply_nested())
        title = HTTPStatus(error.status_code).phrase
        problem = ProblemError.with_status(error.status_code, title, str(error.detail))
        return _problem_response(request, problem)

    @app.exception_handler(PoolTimeout)
    async def handle_pool_timeout(request: Request, error: PoolTimeout) -> Response:
        log.warning("no database connection free within the pool timeout on %s %s",
                    request.method, request.url.path)
        response = _problem_response(request, ServiceUnavailable(
            "the portal is at capacity; retry after the Retry-After delay"))
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response

    @app.exception_handler(DBAPIError)
    async def handle_database_error(request: Request, error: DBAPIError) -> Response:
        if contended(error) or timed_out(error):
            return _busy_response(request, error)
        if not error.connection_invalidated:
            return await handle_unexpected(request, error)
        log.warning("the database connection was lost on %s %s", request.method,
                    request.url.path)
        response = _problem_response(request, ServiceUnavailable(
            "the database connection was lost; retry after the Retry-After delay"))
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response

    @app.exception_handler(Exception)
    async def handle_unexpected(request: Request, error: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        problem = ProblemError.with_status(
            500, "Internal server error", "an unexpected error occurred; quote the request id"
        )
        return _problem_response(request, problem)
