"""SQL for users and tokens."""

from __future__ import annotations

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from app.auth.models import User


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
