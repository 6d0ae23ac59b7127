"""SQL for users and tokens."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Integer, String, Table, column, func, or_, select, table
from sqlalchemy.orm import Session

from app.auth.models import ApiToken, User
from app.database.prepared import PreparedInsert

# A read model of the tenants domain's memberships: the columns a caller's roles come from
# (auth is below tenants, so it reads the table, never the Membership model).
memberships = table("memberships", column("user_id", Integer), column("tenant_id", Integer),
                    column("role", String))


_TOKENS = cast(Table, ApiToken.__table__)
_ADD_TOKEN = PreparedInsert(_TOKENS, returning=list(_TOKENS.columns))


def add_token(db: Session, values: Mapping[str, Any]) -> Any:
    """A new API token's row, every column as stored (its id and created_at among them)."""
    return _ADD_TOKEN.add(db, values)


def live_token_count(db: Session, user_id: int, now: datetime) -> int:
    """The user's tokens that still work: neither revoked nor expired."""
    return db.scalar(select(func.count()).select_from(ApiToken).where(
        ApiToken.user_id == user_id, ApiToken.revoked_at.is_(None),
        or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > now))) or 0


def user_by_identity(db: Session, issuer: str, subject: str) -> User | None:
    return db.scalar(select(User).where(User.issuer == issuer, User.subject == subject))


def unbound_user_by_email(db: Session, email: str) -> User | None:
    """A user pre-created by email (an invitation or the CLI) who has not signed in yet."""
    return db.scalar(
        select(User)
        .where(func.lower(User.email) == email.lower(), User.subject.is_(None))
        .order_by(User.id)
        .limit(1)
    )


def user_by_email(db: Session, email: str) -> User | None:
    """The user an invitation or admin grant by email means: one whose address the IdP
    verified, or one pre-created by email who has not signed in yet. An account that claims
    the address unverified is never it."""
    return db.scalar(
        select(User)
        .where(func.lower(User.email) == email.lower(),
               or_(User.email_verified.is_(True), User.subject.is_(None)))
        .order_by(User.id)
        .limit(1)
    )


def roles_of(db: Session, user_id: int) -> dict[int, str]:
    """tenant id -> the user's role there."""
    rows = db.execute(select(memberships.c.tenant_id, memberships.c.role)
                      .where(memberships.c.user_id == user_id))
    return {int(tenant_id): str(role) for tenant_id, role in rows}
