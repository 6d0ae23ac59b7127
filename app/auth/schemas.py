from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StringConstraints

from app.kit.validation import SingleLine


class MembershipOut(BaseModel):
    tenant: str
    role: str


class MeOut(BaseModel):
    id: int
    email: str
    name: str
    platform_admin: bool
    memberships: list[MembershipOut]


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[SingleLine, StringConstraints(min_length=1, max_length=100)]
    scopes: Annotated[list[Literal["read", "write", "admin"]], Field(min_length=1, max_length=3)]
    expires_in_days: Annotated[StrictInt, Field(ge=1, le=365)] = 30


class TokenOut(BaseModel):
    id: int
    name: str
    prefix: str
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None


class TokenCreated(TokenOut):
    token: str = Field(description="the secret: shown once, never again")


class CliLoginRequest(BaseModel):
    """What ``portalctl login`` asks the browser for: where its listener waits, the state that
    proves the answer is for it, and the token it wants."""

    model_config = ConfigDict(extra="forbid")

    port: Annotated[StrictInt, Field(ge=1024, le=65535, description="the listener's port")]
    state: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{22,128}$")]
    name: Annotated[SingleLine, StringConstraints(min_length=1, max_length=100)] = "portalctl"
    expires_in_days: Annotated[StrictInt, Field(ge=1, le=365)] = 30
