"""SQL for users and tokens."""

from __future__ import annotations

from sqlalchemy import func, select
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
    return db.scalar(
        select(User).where(func.lower(User.email) == email.lower()).order_by(User.id).limit(1)
    )
