"""ASGI middleware: request ids and security headers, load shedding and the request guard."""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote_to_bytes, urlencode

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.kit.errors import PROBLEM_JSON, ProblemError, ServiceUnavailable, ValidationFailed
from app.kit.logs import AccessLog, new_request_id, request_id_var
from app.kit.metrics import HttpMetrics

_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)


_SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
)
_HSTS = (b"strict-transport-security", b"max-age=31536000; includeSubDomains")
_CSP = (b"content-security-policy", CONTENT_SECURITY_POLICY.encode())
# What an answer may have set itself and is replaced (its own Content-Security-Policy is kept).
_REPLACED = frozenset(name for name, _ in (*_SECURITY_HEADERS, _HSTS)) | {b"x-request-id"}


class AnswerStampMiddleware:
    """What every answer carries, stamped in one pass over its headers as it starts:

    - the request id: a sane ``X-Request-ID`` from the caller, else a new one, echoed back (and
      in the request's log lines);
    - the security headers (a page's own Content-Security-Policy kept);
    - given an ``access`` log, the answer's line, written here where the id and the status are
      at hand rather than in uvicorn's access log (``AccessLog``);
    - given ``metrics``, the request counted by its route's template, method and status, and
      its time to the end of the answer (here, where the status is seen anyway: no wrapper of
      its own per request).
    """

    def __init__(self, app: ASGIApp, access: AccessLog | None = None,
                 metrics: HttpMetrics | None = None) -> None:
        self.app = app
        self.access = access
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        incoming = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = incoming if _SAFE_REQUEST_ID.match(incoming) else new_request_id()
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        token = request_id_var.set(request_id)

        async def send_stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                state[_STATUS] = message["status"]
                _stamp(message, request_id, scope.get("scheme") == "https")
                if self.access is not None:
                    self.access.write(scope, message["status"], request_id)
            await send(message)

        try:
            await self.app(scope, receive, send_stamped)
        finally:
            request_id_var.reset(token)
            if self.metrics is not None:
                self.metrics.record(route_template(scope), scope["method"],
                                    state.get(_STATUS, 500), time.perf_counter() - started)


_STATUS = "answer_status"
UNMATCHED = "unmatched"


def route_template(scope: Scope) -> str:
    """The template of the route that answered (``/api/v1/tenants/{tenant}``), a bounded set;
    ``unmatched`` for a request no route took (a 404, or answered before routing: shed, or
    refused by the request guard)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


def _stamp(message: Message, request_id: str, https: bool) -> None:
    headers = [(name, value) for name, value in message.get("headers", ())
               if name.lower() not in _REPLACED]
    headers.append((b"x-request-id", request_id.encode("latin-1")))
    if not any(name.lower() == _CSP[0] for name, _ in headers):
        headers.append(_CSP)
    headers.extend(_SECURITY_HEADERS)
    if https:
        headers.append(_HSTS)
    message["headers"] = headers


class ProbeBypass:
    """Sends the health probes (``paths``) to ``probes``, the app without its own middlewares,
    and every other request to ``app``. What must run on every answer (the request id, the
    security headers) wraps this; sessions, the failed-token throttle, load shedding and the
    request guard have nothing to do for a probe, which carries no cookie, token or input and
    is never shed."""

    def __init__(self, app: ASGIApp, probes: ASGIApp, paths: frozenset[str]) -> None:
        self.app = app
        self.probes = probes
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in self.paths:
            await self.probes(scope, receive, send)
        else:
            await self.app(scope, receive, send)


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


@dataclass(frozen=True)
class BodyLimits:
    """The most bytes a request body may have: ``default``, or ``upload`` on the paths that
    take uploaded credentials (``upload_paths``)."""

    default: int
    upload: int
    upload_paths: re.Pattern[str]

    def for_path(self, path: str) -> int:
        return self.upload if self.upload_paths.match(path) else self.default


class ControlCharacterGuardMiddleware:
    """Control characters in the path or query, and NUL or a lone surrogate in a JSON or form
    body, are a 422 before any handler sees them; except in a page's form, see below. A body
    over its limit (``BodyLimits``) is a 413 before it is read.

    Why here and not per parameter: PostgreSQL refuses NUL in text and psycopg cannot encode a
    lone surrogate, so such a string reaching a query (a slug in a path, a filter, a free-text
    field, the audit of a refusal quoting the path) would end in a 500. No name or filter the
    portal knows contains a control character. Invalid UTF-8 in a URL arrives as U+FFFD.

    A browser's form post to a page (urlencoded, sent by htmx or asking for HTML) is handed on
    with each such character replaced by U+001A (SUB), a control character every text rule of
    the portal refuses and the database can hold: the form's own handler then answers inside
    the form, in its words, with what the user typed, instead of raw problem+json replacing it.
    The refusal waits in the request's state (``REFUSED_TEXT``): a handler that answers
    anything but its form's 422 is undone and the refusal answered instead
    (``app.http.routing``), so the substitute is never kept.

    The size limit lives here because this is where bodies are read: a ``Content-Length``
    over the limit is refused at once, and a body without one (chunked) is read only up to
    the limit, so nothing, here or in a handler, ever holds more than the limit.
    """

    def __init__(self, app: ASGIApp, limits: BodyLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        original = scope
        error: ProblemError | None = _url_problem(scope)
        if error is None and scope["method"] not in _BODILESS:
            scope, receive, error = await self._checked_body(scope, receive)
        if error is not None:
            await _problem(scope, send, error, [])
            return
        await self.app(scope, receive, send)
        if scope is not original and "route" in scope:
            original["route"] = scope["route"]  # the route that answered, for the metrics

    async def _checked_body(self, scope: Scope, receive: Receive
                            ) -> tuple[Scope, Receive, ProblemError | None]:
        """The request as the app gets it, or the problem with its body."""
        media_type, length = _framing(scope)
        limit = self.limits.default
        if length is None or length > limit:  # only then can the path's limit matter
            limit = self.limits.for_path(scope["path"])
        if length is not None and length > limit:
            return scope, receive, _too_large(limit)
        check = _BODY_CHECKS.get(media_type)
        if check is None and length is not None:
            return scope, receive, None  # its length is within the limit: the app reads it
        body, replay = await _buffered(receive, limit)
        if body is None:
            return scope, receive, _too_large(limit)
        error = None if check is None else await check(scope, body)
        if error is not None and _is_page_form(scope):
            scope, replay = _with_body(scope, receive, _substituted_form(body))
            scope.setdefault("state", {})[REFUSED_TEXT] = error
            error = None
        return scope, replay, error


_CONTROL_IN_PATH = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Raw or percent-encoded, as the query string arrives: C0, DEL and (UTF-8) C1 controls.
_CONTROL_IN_QUERY = re.compile(
    rb"[\x00-\x1f\x7f]|\xc2[\x80-\x9f]|%[01][0-9a-f]|%7f|%c2%[89][0-9a-f]", re.IGNORECASE)
# What may decode to NUL or a lone surrogate; a raw NUL byte also marks UTF-16/32 JSON.
_SUSPECT_JSON = re.compile(rb"\\u0000|\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]|\x00")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _url_problem(scope: Scope) -> ValidationFailed | None:
    path: str = scope.get("path", "")
    query: bytes = scope.get("query_string", b"")
    found = _CONTROL_IN_PATH.search(path)
    if found is not None:
        return ValidationFailed(f"the path contains the control character {_code(found.group())}")
    encoded = _CONTROL_IN_QUERY.search(query)
    if encoded is not None:
        character = unquote_to_bytes(encoded.group()).decode("utf-8", "replace")
        return ValidationFailed(f"the query string contains the control character "
                                f"{_code(character)}")
    return None


_BODILESS = frozenset({"GET", "HEAD", "OPTIONS"})


def _media_type(scope: Scope) -> bytes:
    content_type = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
    return _media_type_of(content_type)


def _media_type_of(content_type: bytes) -> bytes:
    media_type = content_type.split(b";")[0].strip().lower()
    return b"application/json" if media_type.endswith(b"+json") else media_type


def _framing(scope: Scope) -> tuple[bytes, int | None]:
    """The body's media type and its length, unless it comes chunked (no trusted length)."""
    content_type, length, chunked = b"", None, False
    for key, value in scope["headers"]:
        if key == b"content-type":
            content_type = value
        elif key == b"content-length":
            length = int(value) if value.isdigit() else None
        elif key == b"transfer-encoding":
            chunked = True
    return _media_type_of(content_type), None if chunked else length


def _too_large(limit: int) -> ProblemError:
    return ProblemError.with_status(
        413, "Content too large",
        f"the request body is larger than this route's limit of {_size(limit)}")


def _size(count: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale and count % scale == 0:
            return f"{count // scale} {unit} ({count} bytes)"
    return f"{count} bytes"


def _is_page_form(scope: Scope) -> bool:
    headers = dict(scope["headers"])
    from_page = (headers.get(b"hx-request") == b"true"
                 or b"text/html" in headers.get(b"accept", b""))
    return (from_page and _media_type(scope) == b"application/x-www-form-urlencoded"
            and not scope["path"].startswith("/api/"))


# The request state's key for the refusal a page's form post carries to its handler.
REFUSED_TEXT = "refused_text"
# Stands in for a character the database cannot hold; refused by every text rule.
SUBSTITUTE = "\x1a"


def _substituted_form(body: bytes) -> bytes:
    """Decoded as Starlette decodes a urlencoded form (UTF-8, invalid bytes as U+FFFD)."""
    fields = parse_qsl(body.decode("latin-1"), keep_blank_values=True)
    return urlencode([(_UNSTORABLE.sub(SUBSTITUTE, key), _UNSTORABLE.sub(SUBSTITUTE, value))
                      for key, value in fields]).encode()


def _with_body(scope: Scope, receive: Receive, body: bytes) -> tuple[Scope, Receive]:
    """The request with ``body`` in place of the one already read from ``receive``."""
    headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replaced() -> Message:
        return pending.pop() if pending else await receive()

    return {**scope, "headers": headers}, replaced


async def _buffered(receive: Receive, limit: int) -> tuple[bytes | None, Receive]:
    """The whole body, and a ``receive`` that hands the same messages on to the app; no body
    once more than ``limit`` bytes came (the rest is never read)."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        size += len(message.get("body", b""))
        if size > limit:
            return None, receive
        if message["type"] != "http.request" or not message.get("more_body", False):
            break

    async def replay() -> Message:
        return messages.pop(0) if messages else await receive()

    return b"".join(m.get("body", b"") for m in messages), replay


async def _json_problem(scope: Scope, body: bytes) -> ValidationFailed | None:
    if not _SUSPECT_JSON.search(body):
        return None
    try:
        document = json.loads(body)
    except RecursionError:
        return too_deeply_nested()
    except ValueError:
        return None  # not JSON: the route's own parsing answers
    found = _unstorable_text(document, ())
    if found is None:
        return None
    return _field_problem(*found)


async def _form_problem(scope: Scope, body: bytes) -> ValidationFailed | None:
    """Parsed as the app will parse it: a multipart part may name a charset such as UTF-7."""
    async def whole_body() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        form = await Request(scope, whole_body).form()
    except Exception:
        return None  # a malformed form is the route's to answer
    try:
        for key, value in form.multi_items():
            found = _unstorable_text(key, (key,)) or _unstorable_text(value, (key,))
            if found is not None:
                return _field_problem(*found)
        return None
    finally:
        await form.close()


# Python's parser reads JSON nested up to about its recursion limit (1,000) less the frames
# below it; at least this deep, whatever calls it.
READABLE_JSON_DEPTH = 500


def too_deeply_nested() -> ValidationFailed:
    """The answer to a JSON body nested deeper than the parser goes, wherever it is parsed."""
    return ValidationFailed(f"the JSON body is nested too deeply to read (the portal reads "
                            f"bodies nested up to {READABLE_JSON_DEPTH} levels)")


def _field_problem(field: str, character: str) -> ValidationFailed:
    return ValidationFailed.on_field(field, f"must not contain {_code(character)}")


def _unstorable_text(value: object, path: tuple[str, ...]) -> tuple[str, str] | None:
    """The first string (or key) holding NUL or a lone surrogate: its dotted path and that.

    Walked with a stack of its own, not by recursion: a document nested about as deep as the
    parser reads would otherwise run out of the interpreter's recursion limit. Each entry
    links to its parent's path, spelled out only for the string found.
    """
    pending: list[tuple[object, _Path | None]] = [(value, None)]
    while pending:
        value, where = pending.pop()
        if isinstance(value, str):
            character = _UNSTORABLE.search(value)
            if character:
                return ".".join((*path, *_names(where))), character.group()
            continue
        items: list[tuple[object, object]] = []
        if isinstance(value, dict):
            items = list(value.items())
        elif isinstance(value, list):
            items = list(enumerate(value))
        inner: list[tuple[object, _Path | None]] = []
        for key, item in items:
            item_where = (str(key), where)
            if isinstance(key, str):
                inner.append((key, item_where))
            inner.append((item, item_where))
        pending.extend(reversed(inner))  # popped in document order
    return None


# Where in the document: (the last key or index, where its parent is); the root is None.
_Path = tuple[str, "_Path | None"]


def _names(where: _Path | None) -> list[str]:
    names: list[str] = []
    while where is not None:
        names.append(where[0])
        where = where[1]
    return names[::-1]


_BODY_CHECKS = {
    b"application/json": _json_problem,
    b"application/x-www-form-urlencoded": _form_problem,
    b"multipart/form-data": _form_problem,
}


def _code(character: str) -> str:
    name = "NUL " if character == "\x00" else ""
    return f"{name}U+{ord(character):04X}"


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
