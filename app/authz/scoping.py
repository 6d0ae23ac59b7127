"""The one place that decides which tenant rows a principal may see and what it may do.

Every tenant-scoped query starts from ``tenants_visible_to`` or ``tenant_for``. A tenant the
principal may not see answers 404, never 403, so slugs and ids cannot be probed.
"""

from __future__ import annotations

from typing import Literal

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.errors import Forbidden, NotFound
from app.tenants.models import Tenant

Action = Literal["read", "operate", "manage"]


class TenantHidden(NotFound):
    """A tenant the caller may not see: a 404 so slugs cannot be probed, audited as a denial."""

# operate: create/resize clusters, get kubeconfigs; manage: members, quota requests.
_ROLE_ACTIONS: dict[str, frozenset[str]] = {
    "viewer": frozenset({"read"}),
    "member": frozenset({"read", "operate"}),
    "admin": frozenset({"read", "operate", "manage"}),
}


def tenants_visible_to(principal: Principal) -> Select[Tenant]:
    query = select(Tenant)
    if principal.is_platform_admin:
        return query
    return query.where(Tenant.id.in_(list(principal.roles)))


def tenant_for(db: Session, principal: Principal, slug: str, action: Action = "read") -> Tenant:
    tenant = _visible_tenant(db, principal, slug)
    if tenant is None:
        raise TenantHidden(f"no tenant {slug!r}")
    ensure_allowed(principal, tenant, action)
    return tenant


def _visible_tenant(db: Session, principal: Principal, slug: str) -> Tenant | None:
    """The tenant, read once per session (a page asks several services for the same one)."""
    found: dict[tuple[object, ...], Tenant] = db.info.setdefault("tenants_by_slug", {})
    key = (slug, principal.user_id, principal.is_platform_admin,
           tuple(sorted(principal.roles.items())))
    if key not in found:
        tenant = db.scalar(tenants_visible_to(principal).where(Tenant.slug == slug))
        if tenant is None:
            return None
        found[key] = tenant
    return found[key]


def ensure_allowed(principal: Principal, tenant: Tenant, action: Action) -> None:
    if action != "read" and not principal.can_write():
        raise Forbidden("this API token is read-only")
    if principal.is_platform_admin:
        return
    role = principal.roles.get(tenant.id)
    if role is None:
        raise TenantHidden(f"no tenant {tenant.slug!r}")
    if action not in _ROLE_ACTIONS[role]:
        raise Forbidden(f"your role {role!r} in {tenant.slug!r} may not {action} here")
    if action != "read" and tenant.state == "suspended":
        raise Forbidden(f"tenant {tenant.slug!r} is suspended: read-only until reactivated")


def ensure_platform_admin(principal: Principal) -> None:
    if not principal.is_platform_admin:
        raise Forbidden("only platform admins may do this")


def ensure_platform_writer(principal: Principal) -> None:
    ensure_platform_admin(principal)
    if not principal.can_write():
        raise Forbidden("this API token is read-only")


def tenant_ids_managed_by(principal: Principal) -> list[int] | None:
    """Tenants whose admin pages (audit, members) the principal may see; None means all."""
    if principal.is_platform_admin:
        return None
    return [tenant_id for tenant_id, role in principal.roles.items() if role == "admin"]
