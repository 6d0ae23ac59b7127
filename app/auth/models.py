"""Users, their API tokens and their browser sessions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String, UniqueConstraint
from sqlalchemy import false as sa_false
from sqlalchemy.orm import Mapped, mapped_column

from app.database.core import Base, utcnow

# The widths of what an IdP asserts about a user. A name is as wide as an email: a user invited
# by email is named by the address until they sign in.
USER_EMAIL_MAX = 320
USER_NAME_MAX = USER_EMAIL_MAX
USER_SUBJECT_MAX = 255  # OpenID Connect's own limit


class User(Base):
    """A person known by the IdP's issuer + subject; pre-created by email until first sign-in."""

    __tablename__ = "users"
    __table_args__ = (UniqueConstraint("issuer", "subject"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    issuer: Mapped[str | None] = mapped_column(String(500))
    subject: Mapped[str | None] = mapped_column(String(USER_SUBJECT_MAX))
    email: Mapped[str] = mapped_column(String(USER_EMAIL_MAX), index=True)
    # Whether the IdP vouched for the address at the last sign-in; an invitation or an admin
    # grant by email only ever lands on a verified (or not yet signed-in) user.
    email_verified: Mapped[bool] = mapped_column(default=False, server_default=sa_false())
    name: Mapped[str] = mapped_column(String(USER_NAME_MAX), default="")
    # From the IdP's admin group at each sign-in.
    is_platform_admin: Mapped[bool] = mapped_column(default=False)
    # Granted by an operator with `portal users make-admin`; survives sign-ins.
    admin_granted: Mapped[bool] = mapped_column(default=False)
    groups: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_login_at: Mapped[datetime | None]

    @property
    def platform_admin(self) -> bool:
        return self.is_platform_admin or self.admin_granted


class ApiToken(Base):
    """A bearer token for REST clients; only a hash of the secret is kept."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    scopes: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]


class WebSession(Base):
    """A server-side browser session; the cookie carries only a random id, stored hashed."""

    __tablename__ = "web_sessions"
    __table_args__ = (Index(None, "expires_at"),)

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]


class IdempotencyKey(Base):
    """The remembered response of a creating POST, replayed when the same key comes again."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (UniqueConstraint("principal", "key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    principal: Mapped[str] = mapped_column(String(100))
    key: Mapped[str] = mapped_column(String(255))
    request_fingerprint: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int]
    response_body: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
