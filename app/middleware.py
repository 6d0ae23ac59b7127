"""ASGI middleware: request ids and security headers."""

from __future__ import annotations

import asyncio
import json
import re

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import PROBLEM_JSON, ProblemError, ServiceUnavailable, ValidationFailed
from app.logs import new_request_id, request_id_var

_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)


class RequestIdMiddleware:
    """Takes a sane ``X-Request-ID`` from the caller or makes one; echoes it on the response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = incoming if _SAFE_REQUEST_ID.match(incoming) else new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        token = request_id_var.set(request_id)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)["X-Request-ID"] = request_id
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id_var.reset(token)


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
                headers["X-Content-Type-Options"] = "nosniff"
                headers["Referrer-Policy"] = "same-origin"
                headers["X-Frame-Options"] = "DENY"
                if scope.get("scheme") == "https":
                    headers["Strict-Transport-Security"] = "max-age=31536000; includeSubDomains"
            await send(message)

        await self.app(scope, receive, send_with_headers)


class LoadSheddingMiddleware:
    """Past ``limit`` requests in flight, answers 503 with ``Retry-After`` at once.

    Why: a request the process cannot start soon only waits in a queue while its client times
    out and retries; turning it away keeps the admitted ones at the process's capacity. Probes
    and static files are never shed, so an orchestrator does not restart a busy replica.
    """

    def __init__(self, app: ASGIApp, limit: int, exempt: tuple[str, ...]) -> None:
        self.app = app
        self.limit = limit
        self.exempt = exempt
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(self.exempt):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            # Held briefly (costs no CPU): clients that retry at once without honouring
            # Retry-After would otherwise spend the capacity on 503s (seen: 70 req/s left).
            await asyncio.sleep(SHED_DELAY_SECONDS)
            await _overloaded(scope, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


class NulByteGuardMiddleware:
    """A NUL byte in the path or query string is a 422, before any handler sees it.

    Why here and not per parameter: PostgreSQL refuses NUL in text, so any string that reaches
    a query (slugs in paths, filters) would otherwise end in a 500; no name or filter the
    portal knows contains one.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _carries_nul(scope):
            error = ValidationFailed("the request's path or query string contains a NUL byte")
            await _problem(scope, send, error, [])
            return
        await self.app(scope, receive, send)


def _carries_nul(scope: Scope) -> bool:
    query: bytes = scope.get("query_string", b"")
    path: str = scope.get("path", "")
    return "\x00" in path or b"%00" in query or b"\x00" in query


RETRY_AFTER_SECONDS = 1
SHED_DELAY_SECONDS = 0.2


async def _overloaded(scope: Scope, send: Send) -> None:
    error = ServiceUnavailable("the portal is at capacity; retry after the Retry-After delay")
    await _problem(scope, send, error, [(b"retry-after", str(RETRY_AFTER_SECONDS).encode())])


async def _problem(scope: Scope, send: Send, error: ProblemError,
                   headers: list[tuple[bytes, bytes]]) -> None:
    request_id = scope.get("state", {}).get("request_id", "")
    body = json.dumps(error.to_problem(scope["path"], request_id)).encode()
    await send({"type": "http.response.start", "status": error.status, "headers": [
        (b"content-type", PROBLEM_JSON.encode()),
        (b"content-length", str(len(body)).encode()),
        *headers,
    ]})
    await send({"type": "http.response.body", "body": body})
