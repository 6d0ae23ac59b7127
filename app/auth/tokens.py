"""API tokens: 256 bits from a CSPRNG, shown once, kept as a SHA-256 hash."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import ApiToken
from app.db import utcnow

TOKEN_PREFIX = "gtp_"  # noqa: S105 - a public marker, not a secret
SCOPES = ("read", "write", "admin")


def new_token_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


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
    token.last_used_at = now
    return token
