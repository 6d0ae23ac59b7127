"""The caller of a request, as FastAPI dependencies: ``CurrentPrincipal``, ``MaybePrincipal``."""

from __future__ import annotations

from collections.abc import Hashable
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from app.auth import repository
from app.auth.models import ApiToken, User, WebSession
from app.auth.principal import Principal
from app.auth.principal_cache import PrincipalCache, watch
from app.auth.sessions import PLAIN_COOKIE, SECURE_COOKIE
from app.auth.throttle import THROTTLED, FailedAuthThrottle
from app.auth.tokens import active_token, bearer_secret, hash_token
from app.database.core import Database
from app.http import hop
from app.kit.errors import TooManyRequests, Unauthenticated

# A commit touching any of these empties the caches of who callers are (memberships: the
# tenants domain watches its own table). A new token changes no cached caller: creating one
# (a CI job's every run, say) leaves every process's cache as it is.
watch(User)
watch(ApiToken, inserts=False)
# A browser session's end (logout, a removed user) ends what every process keeps of it.
watch(WebSession, inserts=False, updates=False)


def _session_user_id(request: Request) -> int | None:
    return request.session.get("uid") if "session" in request.scope else None


def _principal_key(request: Request) -> tuple[Hashable, ...] | None:
    secret = bearer_secret(request.scope)
    if secret is not None:
        return ("token", hash_token(secret))
    user_id = _session_user_id(request)
    return None if user_id is None else ("session", user_id)


def _resolve_principal(request: Request) -> tuple[Principal | None, datetime | None]:
    """In a transaction of its own: a connection is never held from one thread hop to the next
    (threads waiting for connections held by requests waiting for threads would deadlock), and
    a token's last-use write commits at once instead of holding its row for the request."""
    if bearer_secret(request.scope) is not None:
        # Again here, on the thread: requests queued for one passed the middleware's check
        # before the failures ahead of them were counted.
        throttle: FailedAuthThrottle = request.app.state.auth_throttle
        throttle.refuse_guess_if_blocked(request.scope)
    database: Database = request.app.state.database
    with database.transaction() as db:
        return _principal_for(db, request)


def _principal_for(db: Session, request: Request) -> tuple[Principal | None, datetime | None]:
    """The caller, and until when that answer holds at most (a token's expiry)."""
    secret = bearer_secret(request.scope)
    if secret is not None:
        token = active_token(db, secret)
        if token is None:
            raise Unauthenticated("the API token is unknown, expired or revoked")
        user = db.get(User, token.user_id)
        if user is None:
            raise Unauthenticated("the API token's user is gone")
        principal = Principal(user=_detached_copy(user), via="token",
                              scopes=frozenset(token.scopes), token_id=token.id,
                              roles=repository.roles_of(db, user.id))
        return principal, token.expires_at
    user_id = _session_user_id(request)
    if user_id is None:
        return None, None
    user = db.get(User, user_id)
    if user is None:
        return None, None
    principal = Principal(user=_detached_copy(user), via="session",
                          roles=repository.roles_of(db, user.id))
    return principal, None


def _detached_copy(user: User) -> User:
    """A copy in no session: a cached principal is shared by concurrent requests."""
    return User(id=user.id, issuer=user.issuer, subject=user.subject, email=user.email,
                email_verified=user.email_verified, name=user.name,
                is_platform_admin=user.is_platform_admin, admin_granted=user.admin_granted,
                groups=list(user.groups), created_at=user.created_at,
                last_login_at=user.last_login_at)


# The caller, once resolved for a request: every dependency that asks for it takes it from here.
_RESOLVED = "portal.principal"
_UNRESOLVED = object()


async def optional_principal(request: Request) -> Principal | None:
    """A plain function of the request, not a tree of dependencies: FastAPI solves each
    sub-dependency on every request, and the CSRF guard and the endpoint both ask for this."""
    found: Principal | object | None = request.scope.get(_RESOLVED, _UNRESOLVED)
    if found is None or isinstance(found, Principal):
        return found
    cache: PrincipalCache = request.app.state.principals
    key = _principal_key(request)
    principal = cache.get(key) if key is not None else None
    if principal is None and key is not None:
        try:
            principal, valid_until = await hop.run_sync(_resolve_principal, request)
        except Unauthenticated:
            # A blocked address's failures are 429; its valid tokens were served above.
            wait = request.app.state.auth_throttle.note_failure(request.scope)
            if wait is not None:
                raise TooManyRequests(THROTTLED, retry_after=wait) from None
            raise
        if principal is not None:
            cache.put(key, principal, valid_until)
    request.scope[_RESOLVED] = principal
    request.state.principal = principal
    # Plain values for error handlers, which run after the request's session is gone.
    request.state.actor = (principal.user_id, principal.label) if principal else None
    return principal


async def require_principal(request: Request) -> Principal:
    principal = await optional_principal(request)
    if principal is None:
        raise Unauthenticated("sign in or send an API token")
    return principal


# What the OpenAPI document offers under "Authorize"; the caller is resolved above, from the
# same header and cookie, whichever of them these read.
api_token = HTTPBearer(
    auto_error=False, scheme_name="apiToken",
    description="An API token: `portal tokens create EMAIL` (operators), `portalctl tokens "
                "create` or the API tokens page (`/tokens`). Sent as `Authorization: Bearer "
                "<token>`; a token's scopes (`read`, `write`, `admin`) bound what it may do.")
session_cookie = APIKeyCookie(
    name=PLAIN_COOKIE, auto_error=False, scheme_name="sessionCookie",
    description=f"The browser's session after signing in with SSO (`{SECURE_COOKIE}` in "
                "production). A state change signed in by it also needs the session's "
                "`X-CSRF-Token` header; scripts should use an API token.")


async def authenticated_principal(
    request: Request,
    _token: Annotated[HTTPAuthorizationCredentials | None, Security(api_token)],
    _cookie: Annotated[str | None, Security(session_cookie)],
) -> Principal:
    return await require_principal(request)


CurrentPrincipal = Annotated[Principal, Depends(authenticated_principal)]
MaybePrincipal = Annotated[Principal | None, Depends(optional_principal)]
