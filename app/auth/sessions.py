"""Server-side browser sessions.

The cookie carries only a random id; the row is keyed by its SHA-256, so a database leak does
not hand out live sessions. A session ends on logout, after an idle period and after an
absolute lifetime. ``rotate_session`` gives the session a new id (at login).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from http.cookies import SimpleCookie
from typing import Any

from sqlalchemy import bindparam, delete, select
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.auth.models import WebSession
from app.auth.principal_cache import ExpiringCache
from app.database.core import Database, utcnow
from app.database.prepared import Prepared
from app.http import hop

PLAIN_COOKIE = "portal_session"
SECURE_COOKIE = "__Host-portal_session"
_TOUCH_EVERY = timedelta(minutes=1)


@dataclass(frozen=True)
class SessionPolicy:
    idle: timedelta
    absolute: timedelta


def hash_session_id(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def rotate_session(request: Request) -> None:
    request.scope["session_rotate"] = True


def end_session(request: Request) -> None:
    request.session.clear()
    request.scope["session_end"] = True


@dataclass
class _Loaded:
    id_hash: str | None
    data: dict[str, Any]
    needs_touch: bool


_NO_SESSION = _Loaded(None, {}, needs_touch=False)


_LOAD = Prepared(select(WebSession.data, WebSession.last_seen_at, WebSession.expires_at)
                 .where(WebSession.id_hash == bindparam("id_hash")))


class SessionStore:
    """``cache``: signed-in sessions as last read, under the principal cache's rules (its
    module says how stale they may be): a session's data does not change while it is signed
    in, and its end (logout, a removed user) empties every process's caches."""

    def __init__(self, database: Database, policy: SessionPolicy,
                 cache: ExpiringCache[Any] | None = None) -> None:
        self.database = database
        self.policy = policy
        self.cache = cache

    def cached(self, session_id: str) -> _Loaded | None:
        """The session as this process last read it, if it is still good; no I/O (for the
        event loop). None: ``load`` it."""
        if self.cache is None:
            return None
        id_hash = hash_session_id(session_id)
        row = self.cache.get(id_hash)
        return None if row is None else self._unexpired(id_hash, row)

    def load(self, session_id: str | None) -> _Loaded:
        """One SELECT, outside a transaction (every cookie-signed request the cache does not
        answer pays for this)."""
        if not session_id:
            return _Loaded(None, {}, needs_touch=False)
        id_hash = hash_session_id(session_id)
        with self.database.read_session() as db:
            # On the driver's cursor: none of the ORM's or the connection's execution (most of
            # this lookup's CPU, paid by every signed-in page).
            found = _LOAD.rows(db, {"id_hash": id_hash})
        if not found:
            return _Loaded(None, {}, needs_touch=False)
        loaded = self._unexpired(id_hash, found[0])
        if loaded is None:
            self.delete(id_hash)
            return _Loaded(None, {}, needs_touch=False)
        if self.cache is not None and "uid" in loaded.data:  # not one signing in: it changes
            self.cache.put(id_hash, found[0], valid_until=found[0].expires_at)
        return loaded

    def _unexpired(self, id_hash: str, row: Any) -> _Loaded | None:
        """None when the session has ended (idle too long, or past its lifetime)."""
        now = utcnow()
        if row.expires_at <= now or row.last_seen_at + self.policy.idle <= now:
            return None
        return _Loaded(id_hash, dict(row.data), row.last_seen_at + _TOUCH_EVERY <= now)

    def save(self, id_hash: str | None, data: dict[str, Any]) -> str | None:
        """Writes the session; returns a new cookie value when a new row was made."""
        now = utcnow()
        with self.database.session() as db:
            row = db.get(WebSession, id_hash) if id_hash else None
            new_id = None
            if row is None:
                new_id = secrets.token_urlsafe(32)
                row = WebSession(
                    id_hash=hash_session_id(new_id), created_at=now,
                    expires_at=now + self.policy.absolute,
                )
                db.add(row)
            row.data = data
            row.user_id = data.get("uid")
            row.last_seen_at = now
            db.commit()
        self._forget(id_hash)
        return new_id

    def delete(self, id_hash: str) -> None:
        with self.database.session() as db:
            db.execute(delete(WebSession).where(WebSession.id_hash == id_hash))
            db.commit()
        self._forget(id_hash)

    def _forget(self, id_hash: str | None) -> None:
        if self.cache is not None and id_hash is not None:
            self.cache.discard(id_hash)

    def delete_for_user(self, user_id: int) -> None:
        with self.database.session() as db:
            db.execute(delete(WebSession).where(WebSession.user_id == user_id))
            db.commit()


class ServerSideSessionMiddleware:
    def __init__(
        self, app: ASGIApp, store_factory: Callable[[], SessionStore], always_secure: bool
    ) -> None:
        self.app = app
        self.store_factory = store_factory
        # In production the cookie is Secure even when TLS ends at a proxy in front of us.
        self.always_secure = always_secure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        store = self.store_factory()
        secure = self.always_secure or scope.get("scheme") == "https"
        cookie_name = SECURE_COOKIE if secure else PLAIN_COOKIE
        cookie = _read_cookie(scope, cookie_name)
        loaded = await self._session(store, cookie, scope["path"]) if cookie else _NO_SESSION
        scope["session"] = dict(loaded.data)
        original = json.dumps(loaded.data, sort_keys=True) if loaded.data else "{}"

        async def send_with_session(message: Message) -> None:
            if message["type"] == "http.response.start":
                cookie = await self._persist(scope, store, loaded, original)
                if cookie is not None:
                    header = _cookie_header(cookie_name, cookie, secure, store.policy)
                    MutableHeaders(scope=message).append("Set-Cookie", header)
            await send(message)

        await self.app(scope, receive, send_with_session)

    @staticmethod
    async def _session(store: SessionStore, cookie: str, path: str) -> _Loaded:
        # Signing in and out reads the row itself: what it keeps there (where to go after
        # signing in) may have changed through another process a moment ago.
        cached = None if path.startswith("/auth/") else store.cached(cookie)
        return cached if cached is not None else await hop.run_sync(store.load, cookie)

    async def _persist(
        self, scope: Scope, store: SessionStore, loaded: _Loaded, original: str
    ) -> str | None:
        """Returns the new cookie value, "" to clear the cookie, None to leave it."""
        data: dict[str, Any] = scope["session"]
        if scope.get("session_end"):
            if loaded.id_hash:
                await hop.run_sync(store.delete, loaded.id_hash)
            return ""
        id_hash = loaded.id_hash
        if scope.get("session_rotate") and id_hash:
            await hop.run_sync(store.delete, id_hash)
            id_hash = None
        if not data and id_hash is None:
            return None
        if id_hash is None or loaded.needs_touch or json.dumps(data, sort_keys=True) != original:
            return await hop.run_sync(store.save, id_hash, data)
        return None


def _read_cookie(scope: Scope, name: str) -> str | None:
    raw = dict(scope["headers"]).get(b"cookie", b"").decode("latin-1")
    if not raw:
        return None
    cookie: SimpleCookie = SimpleCookie()
    try:
        cookie.load(raw)
    except Exception:
        return None
    morsel = cookie.get(name)
    return morsel.value if morsel else None


def _cookie_header(name: str, value: str, secure: bool, policy: SessionPolicy) -> str:
    parts = [f"{name}={value}", "Path=/", "HttpOnly", "SameSite=Lax"]
    if secure:
        parts.append("Secure")
    if value:
        parts.append(f"Max-Age={int(policy.absolute.total_seconds())}")
    else:
        parts.append("Max-Age=0")
    return "; ".join(parts)


