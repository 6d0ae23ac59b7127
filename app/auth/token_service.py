"""A user's own API tokens: list, create (secret shown once), revoke."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth import repository
from app.auth.models import ApiToken, User
from app.auth.principal import Principal
from app.auth.service import issue_api_token
from app.auth.tokens import SCOPES, hash_token
from app.database.concurrency import lock_row
from app.database.core import utcnow
from app.http.pagination import PageParams, paginate
from app.kit.config import Settings
from app.kit.errors import Forbidden, NotFound, ValidationFailed
from app.kit.limits import Limit


def list_tokens(
    db: Session, principal: Principal, params: PageParams
) -> tuple[Sequence[ApiToken], str | None]:
    query = select(ApiToken).where(ApiToken.user_id == principal.user_id)
    return paginate(db, query, ApiToken.id, params, newest_first=True)


def scopes_offered(principal: Principal) -> tuple[str, ...]:
    """The scopes the user's tokens can use: "admin" only acts for platform admins."""
    if principal.user_is_platform_admin:
        return SCOPES
    return tuple(scope for scope in SCOPES if scope != "admin")


def create_token(
    db: Session, principal: Principal, settings: Settings, *, name: str, scopes: list[str],
    expires_in_days: int,
) -> tuple[Any, str]:
    if not principal.can_write():
        raise Forbidden("a read-only token cannot create tokens")
    if expires_in_days > settings.token_max_lifetime_days:
        raise ValidationFailed.on_field(
            "expires_in_days", f"at most {settings.token_max_lifetime_days} days "
                               "(PORTAL_TOKEN_MAX_LIFETIME_DAYS)")
    offered = scopes_offered(principal)
    beyond = sorted(set(scopes) - set(offered))
    if beyond:
        raise ValidationFailed.on_field(
            "scopes", f"{', '.join(beyond)}: only platform admins can hold that scope; "
                      f"your tokens can have {' and '.join(offered)}")
    if principal.via == "token" and not set(scopes) <= principal.scopes:
        raise Forbidden("a token cannot create a token with more scopes than its own")
    ensure_room_for_a_token(db, settings, principal)
    return issue_api_token(
        db, principal.user, name=name, scopes=scopes,
        expires_at=utcnow() + timedelta(days=expires_in_days), actor_label=principal.label,
    )


def live_tokens_limit(settings: Settings) -> Limit:
    return Limit("live_tokens", "live API tokens", "PORTAL_USER_MAX_LIVE_TOKENS",
                 settings.user_max_live_tokens)


def ensure_room_for_a_token(db: Session, settings: Settings, principal: Principal) -> None:
    """Counted under a lock of the user's row: two creates at once cannot both take the last
    place."""
    lock_row(db, User, principal.user_id, keys_free=True)
    live_tokens_limit(settings).ensure_room(
        repository.live_token_count(db, principal.user_id, utcnow()), principal.email,
        "revoke one first (portalctl tokens revoke, or the API tokens page)")


def revoke_token(db: Session, principal: Principal, token_id: int) -> ApiToken:
    token = db.scalar(select(ApiToken).where(
        ApiToken.id == token_id, ApiToken.user_id == principal.user_id))
    if token is None:
        raise NotFound(f"no token {token_id}")
    _revoke(db, principal, token)
    return token


def revoke_current(db: Session, principal: Principal, secret: str) -> ApiToken:
    """Signing out from a command line (``portalctl logout``)."""
    if principal.via != "token":
        raise ValidationFailed("only a request made with an API token can revoke its token")
    token = db.scalar(select(ApiToken).where(
        ApiToken.token_hash == hash_token(secret), ApiToken.user_id == principal.user_id))
    if token is None:
        raise NotFound("the API token is unknown")
    _revoke(db, principal, token)
    return token


def _revoke(db: Session, principal: Principal, token: ApiToken) -> None:
    """The one rule of both routes: a token may always revoke itself (giving up access, which
    ``portalctl logout`` does with read-only tokens too); revoking any other token is a write."""
    if token.id != principal.token_id and not principal.can_write():
        raise Forbidden("a read-only token can revoke only itself")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        audit.record(db, action="api_token.revoke", actor_id=principal.user_id,
                     actor_label=principal.label, target_type="api_token", target_id=token.id,
                     target_label=f"API token {token.name}",
                     before={"revoked_at": None},
                     after={"revoked_at": token.revoked_at.isoformat()})
