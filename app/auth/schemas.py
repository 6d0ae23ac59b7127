from __future__ import annotations

from pydantic import BaseModel


class MembershipOut(BaseModel):
    tenant: str
    role: str


class MeOut(BaseModel):
    id: int
    email: str
    name: str
    platform_admin: bool
    memberships: list[MembershipOut]
