"""Who may get which kubeconfig of which cluster, and for how long."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.authz import TenantHidden
from app.clusters.models import VirtualCluster
from app.database.concurrency import lock_row
from app.kit.config import Settings
from app.kit.errors import Conflict, Forbidden, NotFound, ValidationFailed
from app.kube.port import MIN_TOKEN_EXPIRATION_SECONDS
from app.kubeconfigs import repository
from app.tenants.access import tenant_for
from app.tenants.models import Tenant

# Which kubeconfig roles a tenant role may ask for.
ROLES_BY_TENANT_ROLE: dict[str, tuple[str, ...]] = {
    "admin": ("admin", "edit", "view"),
    "member": ("edit", "view"),
    "viewer": ("view",),
}


def allowed_roles(principal: Principal, tenant: Tenant) -> tuple[str, ...]:
    if principal.is_platform_admin:
        return ROLES_BY_TENANT_ROLE["admin"]
    return ROLES_BY_TENANT_ROLE.get(principal.roles.get(tenant.id, ""), ())


def lifetime_bounds(settings: Settings) -> tuple[int, int]:
    """(default, maximum) token lifetime in seconds, as the operator configured them."""
    maximum = max(MIN_TOKEN_EXPIRATION_SECONDS, int(settings.kubeconfig_max_hours * 3600))
    default = int(settings.kubeconfig_default_hours * 3600)
    return min(max(default, MIN_TOKEN_EXPIRATION_SECONDS), maximum), maximum


def is_ready(cluster: VirtualCluster) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in cluster.conditions or [] if isinstance(c, dict))


def is_tenant_admin(principal: Principal, tenant: Tenant) -> bool:
    return principal.is_platform_admin or principal.roles.get(tenant.id) == "admin"


def ensure_may_issue(principal: Principal, tenant: Tenant, role: str) -> None:
    if not principal.can_write():
        raise Forbidden("this API token is read-only")
    if tenant.state == "suspended":
        raise Forbidden(f"tenant {tenant.slug!r} is suspended: no new kubeconfigs")
    allowed = allowed_roles(principal, tenant)
    if role not in allowed:
        raise Forbidden(f"your role in {tenant.slug!r} allows {' or '.join(allowed)} "
                        f"kubeconfigs, not {role}")


def ensure_still_may_issue(db: Session, principal: Principal, tenant: Tenant,
                            role: str) -> None:
    """The same rules on the caller's rights as committed, under a share lock of the tenant.

    Member removal, role changes and suspension lock or update the tenant row, then revoke
    the grants they find: a grant issued on rights read before they committed (the request's
    roles) would escape them, so it waits for them and looks again.
    """
    locked = lock_row(db, Tenant, tenant.id, shared=True)
    if locked is None:
        raise TenantHidden(f"no tenant {tenant.slug!r}")
    if principal.is_platform_admin:
        current = principal
    else:
        role_now = repository.tenant_role(db, tenant.id, principal.user_id)
        if role_now is None:
            raise TenantHidden(f"no tenant {tenant.slug!r}")
        current = replace(principal, roles={**principal.roles, tenant.id: role_now})
    ensure_may_issue(current, locked, role)


def lifetime(settings: Settings, requested: int | None) -> int:
    default, maximum = lifetime_bounds(settings)
    if requested is None:
        return default
    if requested > maximum:
        raise ValidationFailed.on_field(
            "lifetime_seconds", f"at most {maximum} seconds ({maximum / 3600:g} h) here")
    return requested


def cluster_for(db: Session, principal: Principal, slug: str,
                 name: str) -> tuple[Tenant, VirtualCluster]:
    tenant = tenant_for(db, principal, slug)
    cluster = repository.cluster_in_tenant(db, tenant.id, name)
    if cluster is None:
        raise NotFound(f"no cluster {name!r} in {slug!r}")
    return tenant, cluster


def is_waking(cluster: VirtualCluster) -> bool:
    """Asked to wake, and not back yet (its Asleep condition is still True)."""
    return cluster.power == "asleep" or any(
        c.get("type") == "Asleep" and c.get("status") == "True" for c in cluster.conditions or [])


def ensure_issuable(cluster: VirtualCluster) -> None:
    if cluster.deletion_requested_at is not None:
        raise Conflict(f"cluster {cluster.name!r} is being deleted")
    if not is_ready(cluster) or cluster.admin_kubeconfig_encrypted is None:
        raise Conflict(f"cluster {cluster.name!r} is not Ready yet: try again once it is")
