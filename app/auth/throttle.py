"""Failed authentication, throttled per client address and per token prefix.

After ``limit`` failed API tokens within a minute from one address (an IPv6 caller: its /64),
or with one token prefix (the ``gtp_xxxxxx`` a token's owner sees, from any address), further
requests with an API token from there, or with that prefix, are answered 429 with
``Retry-After`` until the minute that began with the first failure is over, before the token is
looked up or the database touched. A token that works never counts; a blocked one is refused
unread, whether it would have worked or not. Browsers (session cookies) are not held back:
behind one address there may be many people, and a cookie is not a failed authentication.

Why per prefix too: an attacker with many addresses guessing the rest of a token whose prefix
it saw (in a screenshot of the tokens page, say) is held back by the prefix.

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
        it may go on (no API token, or neither is blocked)."""
        if not self._blocked:
            return None
        secret = bearer_secret(scope)
        if secret is None:
            return None
        keys = _keys(scope, secret)
        now = core.monotonic()
        # Only while someone is blocked; the threads read what the event loop writes.
        with self._lock:
            self._forget_expired(now)
            until = max(self._blocked.get(key, 0.0) for key in keys)
        return math.ceil(until - now) if until > now else None

    def refuse_if_blocked(self, scope: Scope) -> None:
        wait = self.retry_after(scope)
        if wait is not None:
            raise TooManyRequests(THROTTLED, retry_after=wait)

    def note_failure(self, scope: Scope) -> None:
        """An API token of this request was refused."""
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
    """Answers a blocked caller's API-token request before the session, the route or the
    database see it; each such answer is counted in the denial log, written later."""

    def __init__(self, app: ASGIApp, throttle: FailedAuthThrottle, denials: DenialLog) -> None:
        self.app = app
        self.throttle = throttle
        self.denials = denials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            wait = self.throttle.retry_after(scope)
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
