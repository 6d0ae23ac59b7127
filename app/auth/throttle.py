"""Failed authentication, throttled per client address and per token prefix.

After ``limit`` failed API tokens within a minute from one address (an IPv6 caller: its /64),
or with one token prefix (the ``gtp_xxxxxx`` a token's owner sees, from any address), further
failures from there, or with that prefix, are answered 429 with ``Retry-After`` instead of 401
until the minute that began with the first failure is over. A token that works never counts.

What each block refuses differs. A blocked prefix is refused before the token is looked up or
the database touched, whether the token would have worked or not: that is the guessing of one
token (whose prefix was seen in a screenshot of the tokens page, say) from many addresses. A
blocked address is not: its requests are looked up as ever and a valid token is served, so one
misconfigured script behind a company's NAT or on a shared CI runner does not lock out every
user whose requests leave from the same address; only its failures get 429. Browsers (session
cookies) are not held back at all: a cookie is not a failed authentication.

The counts live in this process only (a few dicts, the oldest key out first past
``max_keys``): with several processes, a caller gets ``limit`` failures a minute from each.
The check on a request is one truthiness test while nobody is blocked (no lock, no database);
only failures, and requests with a token while someone is blocked, take the lock.
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from app.audit.denials import Denial, DenialLog
from app.auth.tokens import bearer_secret, token_prefix
from app.database import core
from app.http.clients import client_address
from app.kit.errors import PROBLEM_JSON, TooManyRequests

WINDOW_SECONDS = 60.0
MAX_KEYS = 100_000
THROTTLED = ("too many failed API tokens from this address or with this token prefix; retry "
             "after the Retry-After delay")


@dataclass
class _Window:
    started: float  # core.monotonic()
    failures: int


class FailedAuthThrottle:
    def __init__(self, limit: int, window_seconds: float = WINDOW_SECONDS,
                 max_keys: int = MAX_KEYS) -> None:
        self.limit = limit
        self.window_seconds = window_seconds
        self.max_keys = max_keys
        # Both ordered by when their window began: the expired ones are at the front.
        self._windows: OrderedDict[str, _Window] = OrderedDict()
        self._blocked: OrderedDict[str, float] = OrderedDict()  # key -> blocked until
        self._lock = threading.Lock()

    def retry_after(self, scope: Scope) -> int | None:
        """Seconds until this request's address and token prefix may fail again; None when
        neither is blocked (or the request has no API token): asked of a failure."""
        return self._retry_after(scope, prefix_only=False)

    def guess_retry_after(self, scope: Scope) -> int | None:
        """Seconds until this request's token prefix may fail again: asked before the token
        is looked up, where its address alone must not hold a valid token back."""
        return self._retry_after(scope, prefix_only=True)

    def _retry_after(self, scope: Scope, *, prefix_only: bool) -> int | None:
        if not self._blocked:
            return None
        secret = bearer_secret(scope)
        if secret is None:
            return None
        keys = _keys(scope, secret)[1:] if prefix_only else _keys(scope, secret)
        now = core.monotonic()
        # Only while someone is blocked; the threads read what the event loop writes.
        with self._lock:
            self._forget_expired(now)
            until = max(self._blocked.get(key, 0.0) for key in keys)
        return math.ceil(until - now) if until > now else None

    def refuse_guess_if_blocked(self, scope: Scope) -> None:
        wait = self.guess_retry_after(scope)
        if wait is not None:
            raise TooManyRequests(THROTTLED, retry_after=wait)

    def note_failure(self, scope: Scope) -> int | None:
        """An API token of this request was refused: the seconds to answer in ``Retry-After``
        with a 429 when its address or prefix was already blocked, else None (a 401)."""
        wait = self.retry_after(scope)
        self._count_failure(scope)
        return wait

    def _count_failure(self, scope: Scope) -> None:
        secret = bearer_secret(scope)
        if secret is None or self.limit <= 0:
            return
        now = core.monotonic()
        with self._lock:
            self._forget_expired(now)
            for key in _keys(scope, secret):
                window = self._windows.get(key)
                if window is None:
                    window = self._windows[key] = _Window(now, 0)
                    self._keep_at_most(self._windows)
                window.failures += 1
                if window.failures >= self.limit and key not in self._blocked:
                    self._blocked[key] = window.started + self.window_seconds
                    self._keep_at_most(self._blocked)

    def _forget_expired(self, now: float) -> None:
        while self._windows:
            key, window = next(iter(self._windows.items()))
            if window.started + self.window_seconds > now:
                break
            del self._windows[key]
        while self._blocked:
            key, until = next(iter(self._blocked.items()))
            if until > now:
                break
            del self._blocked[key]

    def _keep_at_most(self, entries: OrderedDict[str, _Window] | OrderedDict[str, float]) -> None:
        while len(entries) > self.max_keys:
            entries.popitem(last=False)


def _keys(scope: Scope, secret: str) -> tuple[str, str]:
    return f"address {client_address(scope)}", f"token {token_prefix(secret)}"


class FailedAuthThrottleMiddleware:
    """Answers an API-token request with a blocked prefix before the session, the route or the
    database see it; each such answer is counted in the denial log, written later."""

    def __init__(self, app: ASGIApp, throttle: FailedAuthThrottle, denials: DenialLog) -> None:
        self.app = app
        self.throttle = throttle
        self.denials = denials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            wait = self.throttle.guess_retry_after(scope)
            if wait is not None:
                self.denials.count_only(throttled_denial(scope))
                await _too_many(scope, send, wait)
                return
        await self.app(scope, receive, send)


def throttled_denial(scope: Scope) -> Denial:
    """One kind for every route: a blocked caller varying paths still makes one row."""
    address = client_address(scope)
    return Denial(status=TooManyRequests.status, who=f"anonymous ({address})", actor_id=None,
                  route="*", path="*", detail=THROTTLED)


async def _too_many(scope: Scope, send: Send, wait: int) -> None:
    request_id = scope.get("state", {}).get("request_id", "")
    problem = TooManyRequests(THROTTLED, retry_after=wait).to_problem(scope["path"], request_id)
    body = json.dumps(problem).encode()
    await send({"type": "http.response.start", "status": TooManyRequests.status, "headers": [
        (b"content-type", PROBLEM_JSON.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(wait).encode()),
    ]})
    await send({"type": "http.response.body", "body": body})
