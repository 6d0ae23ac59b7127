"""The one place that decides what a principal may do in a tenant, by its role there.

A tenant the principal may not see answers 404, never 403, so slugs and ids cannot be probed.
Looking a tenant up under these rules (``tenant_for``, ``tenants_visible_to``) is the tenants
domain's: ``app.tenants.access``.
"""

from __future__ import annotations

from typing import Literal, Protocol

from app.auth.principal import Principal
from app.kit.errors import Forbidden, NotFound

Action = Literal["read", "operate", "manage"]


class TenantHidden(NotFound):
    """A tenant the caller may not see: a 404 so slugs cannot be probed, audited as a denial."""


class RoleForbidden(Forbidden):
    """The caller's role in a tenant it belongs to does not allow the action: the tenants
    domain adds who can help (its admins), which only the tenant's own people may learn."""

    def __init__(self, role: str, tenant_slug: str, action: str) -> None:
        super().__init__(f"your role {role!r} in {tenant_slug!r} may not {action} here")
        self.role = role
        self.tenant_slug = tenant_slug
        self.action = action


class ScopedTenant(Protocol):
    """What the rules read of a tenant (``app.tenants.models.Tenant``)."""

    @property
    def id(self) -> int: ...

    @property
    def slug(self) -> str: ...

    @property
    def state(self) -> str: ...


# operate: create/resize clusters, get kubeconfigs; manage: members, quota requests.
_ROLE_ACTIONS: dict[str, frozenset[str]] = {
    "viewer": frozenset({"read"}),
    "member": frozenset({"read", "operate"}),
    "admin": frozenset({"read", "operate", "manage"}),
}


def ensure_allowed(principal: Principal, tenant: ScopedTenant, action: Action) -> None:
    if action != "read" and not principal.can_write():
        raise Forbidden("this API token is read-only")
    if principal.is_platform_admin:
        return
    role = principal.roles.get(tenant.id)
    if role is None:
        raise TenantHidden(f"no tenant {tenant.slug!r}")
    if action not in _ROLE_ACTIONS[role]:
        raise RoleForbidden(role, tenant.slug, action)
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
