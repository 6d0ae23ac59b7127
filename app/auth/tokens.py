"""API tokens: 256 bits from a CSPRNG, shown once, kept as a SHA-256 hash."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session
from starlette.types import Scope

from app.auth.models import ApiToken
from app.auth.principal_cache import AUTH_UNCHANGED
from app.database.core import utcnow

TOKEN_PREFIX = "gtp_"  # noqa: S105 - a public marker, not a secret
# The start of a token its owner sees in lists (``gtp_`` and 6 characters): not enough to use it.
SHOWN_PREFIX_LENGTH = 10
SCOPES = ("read", "write", "admin")
# How precisely a token's last use is kept (shown to its owner, e.g. "2 minutes ago").
LAST_USED_RESOLUTION = timedelta(minutes=1)


def new_token_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_prefix(secret: str) -> str:
    return secret[:SHOWN_PREFIX_LENGTH]


def bearer_secret(scope: Scope) -> str | None:
    """The secret of an ``Authorization: Bearer`` header, or None without one."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            text = value.decode("latin-1")
            return text[7:].strip() if text[:7].lower() == "bearer " else None
    return None


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def active_token(db: Session, secret: str) -> ApiToken | None:
    """The live token for this secret (not revoked, not expired), its last use noted."""
    if not secret.startswith(TOKEN_PREFIX):
        return None
    token = db.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(secret)))
    now = utcnow()
    if token is None or token.revoked_at is not None:
        return None
    if token.expires_at is not None and token.expires_at <= now:
        return None
    note_use(db, token, now)
    return token


def note_use(db: Session, token: ApiToken, now: datetime) -> None:
    """Records the token's last use to the minute, so that reads rarely write.

    Why not on every request: each write locks the token's row until its request commits, and
    a client fanning out with one token then queues every request behind that lock (a load test
    stalled the portal so). Now the first request of a minute takes the row if no other request
    holds it (SKIP LOCKED; SQLite has a single writer anyway) and everyone else writes nothing.
    """
    stale = now - LAST_USED_RESOLUTION
    if token.last_used_at is not None and token.last_used_at > stale:
        return
    claimable = (select(ApiToken.id)
                 .where(ApiToken.id == token.id,
                        or_(ApiToken.last_used_at.is_(None), ApiToken.last_used_at <= stale))
                 .with_for_update(skip_locked=True))
    db.execute(update(ApiToken).where(ApiToken.id.in_(claimable)).values(last_used_at=now)
               .execution_options(synchronize_session=False, **{AUTH_UNCHANGED: True}))
