"""Shapes of tenants and memberships on the API and in forms."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.validation import EmailAddress, SingleLine

MAX_SLUG_LENGTH = 30
_DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

Role = Literal["admin", "member", "viewer"]
TenantState = Literal["active", "suspended"]


def slug_problem(slug: str) -> str | None:
    if not slug:
        return "the slug is required"
    if len(slug) > MAX_SLUG_LENGTH:
        return f"at most {MAX_SLUG_LENGTH} characters (this one has {len(slug)})"
    if not _DNS_1123_LABEL.match(slug):
        return ("a DNS-1123 label: lower-case letters, digits and '-', "
                "starting and ending with a letter or digit")
    return None


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
