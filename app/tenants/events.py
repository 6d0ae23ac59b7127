"""What happens to tenants and memberships that higher domains follow up on (app.kit.hooks)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.kit.hooks import Hook


@dataclass(frozen=True)
class Actor:
    user_id: int | None
    label: str


@dataclass(frozen=True)
class MembershipChanged:
    """A member's role in a tenant changed; ``role`` None means the membership ended."""

    tenant_id: int
    user_id: int
    role: str | None
    actor: Actor


@dataclass(frozen=True)
class TenantSuspended:
    tenant_id: int
    actor: Actor


membership_changed: Hook[[Session, MembershipChanged]] = Hook(
    "tenants.membership_changed", required=True)
tenant_suspended: Hook[[Session, TenantSuspended]] = Hook(
    "tenants.tenant_suspended", required=True)
