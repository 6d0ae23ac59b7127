"""The caller of a request: a signed-in user (session) or a REST client (API token)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from app.auth.models import User


@dataclass(frozen=True)
class Principal:
    user: User
    via: Literal["session", "token", "cli", "worker"]
    scopes: frozenset[str] = frozenset({"read", "write", "admin"})
    # tenant id -> role
    roles: dict[int, str] = field(default_factory=dict)
    # The API token this request is made with (``via == "token"``), which may always revoke
    # itself: giving up one's own access needs no write scope.
    token_id: int | None = None
    # Copied from the user at construction: error pages render after a rollback has expired
    # the ORM row, and must still show who is signed in.
    user_id: int = field(init=False)
    email: str = field(init=False)
    name: str = field(init=False)
    _user_is_admin: bool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "user_id", self.user.id)
        object.__setattr__(self, "email", self.user.email)
        object.__setattr__(self, "name", self.user.name or self.user.email)
        object.__setattr__(self, "_user_is_admin", self.user.platform_admin)

    @property
    def label(self) -> str:
        return self.email

    @property
    def is_platform_admin(self) -> bool:
        return self._user_is_admin and "admin" in self.scopes

    @property
    def user_is_platform_admin(self) -> bool:
        """The user's own standing, whatever this request's token may do."""
        return self._user_is_admin

    def can_write(self) -> bool:
        return "write" in self.scopes or "admin" in self.scopes
