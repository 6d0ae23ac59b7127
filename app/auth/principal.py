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

    @property
    def user_id(self) -> int:
        return self.user.id

    @property
    def label(self) -> str:
        return self.user.email

    @property
    def is_platform_admin(self) -> bool:
        return self.user.platform_admin and "admin" in self.scopes

    def can_write(self) -> bool:
        return "write" in self.scopes or "admin" in self.scopes
