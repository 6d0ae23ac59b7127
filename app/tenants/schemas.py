"""Shapes of tenants and memberships on the API and in forms."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.kit.validation import (
    RESERVED_TENANT_SLUGS,
    EmailAddress,
    SingleLine,
    dns_label_problem,
)

MAX_SLUG_LENGTH = 30

Role = Literal["admin", "member", "viewer"]
TenantState = Literal["active", "suspended"]


def slug_problem(slug: str) -> str | None:
    if slug in RESERVED_TENANT_SLUGS:
        return f"{slug!r} is reserved by the portal"
    problem = dns_label_problem(slug, MAX_SLUG_LENGTH)
    return f"the slug is {problem}" if problem == "required" else problem


class TenantCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    slug: str = Field(max_length=200, examples=["acme"])
    display_name: SingleLine = Field(min_length=1, max_length=100)
    admin_email: EmailAddress | None = Field(
        default=None, max_length=320, description="made the tenant's first admin"
    )

    @field_validator("slug")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        problem = slug_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class TenantUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    display_name: SingleLine | None = Field(default=None, min_length=1, max_length=100)
    state: TenantState | None = None


class TenantOut(BaseModel):
    id: int
    slug: str
    display_name: str
    state: str
    created_at: datetime
    role: str | None = Field(default=None, description="the caller's role in the tenant")


class MemberCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    email: EmailAddress = Field(max_length=320)
    role: Role = "member"


class MemberUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Role


class MemberOut(BaseModel):
    id: int
    user_id: int
    email: str
    name: str
    role: str
    source: str
    pending: bool = Field(description="invited by email, not signed in yet")
    created_at: datetime
