"""``GET /metrics`` on the public port: the process's metrics (under ``--workers N`` every
serving process's) for a scraper that sends ``PORTAL_METRICS_TOKEN`` as a bearer token.

Answered beside the health probes (``app.process.asgi``): no session, CSRF or load shedding,
so a busy portal is still scraped. Without a token configured the path does not exist (404);
an operator then scrapes ``PORTAL_METRICS_ADDRESS``, a listen address kept off the ingress.
"""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from app.http import hop
from app.kit.config import Settings
from app.kit.errors import PROBLEM_JSON, NotFound, ProblemError, Unauthenticated
from app.kit.metrics import CONTENT_TYPE, HttpMetrics, exposition

PATH = "/metrics"
router = APIRouter()


@router.get(PATH, include_in_schema=False)
async def metrics(request: Request) -> Response:
    settings: Settings = request.app.state.settings
    if not settings.metrics_token:
        return _problem(request, NotFound("no such page"))
    if not _bearer_matches(request, settings.metrics_token):
        return _problem(request, Unauthenticated(
            "send the metrics token as Authorization: Bearer <token>"))
    own: HttpMetrics = request.app.state.metrics
    body = await hop.run_sync(exposition, own.registry)
    return Response(body, media_type=CONTENT_TYPE)


def _problem(request: Request, error: ProblemError) -> Response:
    """A scraper's refusal is problem+json whatever it accepts (no page, no sign-in)."""
    body = error.to_problem(request.url.path, getattr(request.state, "request_id", ""))
    headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
    return JSONResponse(body, status_code=error.status, media_type=PROBLEM_JSON,
                        headers=headers)


def _bearer_matches(request: Request, token: str) -> bool:
    """Compared in constant time: how long a wrong token took says nothing of the right one."""
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        presented.strip().encode(), token.encode())
