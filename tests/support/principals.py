"""Callers for API tests: bearer headers for a user, without going through a browser."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.auth import service as auth_service
from app.auth.models import User


def bearer(db: Session, user: User, *scopes: str) -> dict[str, str]:
    """Authorization headers carrying a fresh API token of ``user`` (default: read, write)."""
    _token, secret = auth_service.issue_api_token(
        db, user, name="test", scopes=list(scopes or ("read", "write", "admin")),
        expires_at=None, actor_label="test",
    )
    db.flush()
    return {"Authorization": f"Bearer {secret}"}
