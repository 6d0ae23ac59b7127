"""Tenants as a principal may see them: every tenant-scoped query starts here.

``tenants_visible_to`` and ``tenant_for`` apply ``app.authz``'s rules to the tenant rows.
Tenants looked up by slug are remembered across requests by the web process (``cache_tenants``),
with the rules of the callers' cache (``app.auth.principal_cache``): a commit here that changes a
tenant or a membership empties it at once; a change made by another replica shows after at most
``PORTAL_AUTH_CACHE_SECONDS``. Who may see the tenant is still decided on every call.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Select, bindparam, select
from sqlalchemy.orm import Session, make_transient_to_detached
from sqlalchemy.orm.util import identity_key

from app.auth.principal import Principal
from app.auth.principal_cache import ExpiringCache, changes_pending, watch
from app.authz import Action, RoleForbidden, TenantHidden, ensure_allowed
from app.database.core import Database
from app.kit.errors import Forbidden
from app.tenants import repository
from app.tenants.models import Membership, Tenant

# A commit touching these empties the caches of tenants and of who callers are (their roles).
watch(Tenant, Membership)
_CACHE = "authz.tenant_cache"


def tenants_visible_to(principal: Principal) -> Select[Tenant]:
    query = select(Tenant)
    if principal.is_platform_admin:
        return query
    return query.where(Tenant.id.in_(list(principal.roles)))


# ``tenants_visible_to`` as two statements built once, the caller's tenants bound at execution.
_ALL_TENANTS = select(Tenant)
_THEIR_TENANTS = select(Tenant).where(Tenant.id.in_(bindparam("tenant_ids", expanding=True)))


def tenants_visible_bound(principal: Principal) -> tuple[Select[Tenant], dict[str, Any]]:
    """``tenants_visible_to(principal)`` as a statement shared by every caller of its kind and
    the values to bind to it: a list built on it can keep its statement (and cache key)."""
    if principal.is_platform_admin:
        return _ALL_TENANTS, {}
    return _THEIR_TENANTS, {"tenant_ids": list(principal.roles)}


def tenant_for(db: Session, principal: Principal, slug: str, action: Action = "read") -> Tenant:
    tenant = _visible_tenant(db, principal, slug)
    if tenant is None:
        raise TenantHidden(f"no tenant {slug!r}")
    try:
        ensure_allowed(principal, tenant, action)
    except RoleForbidden as refused:
        raise Forbidden(f"{refused.detail}; {who_can_help(db, tenant, refused.action)}") from None
    return tenant


class Contact(NamedTuple):
    name: str | None
    email: str

    def __str__(self) -> str:
        named = self.name and self.name != self.email
        return f"{self.name} <{self.email}>" if named else self.email


def admins_of(db: Session, tenant: Tenant) -> list[Contact]:
    """A tenant's admins: for its own members only (callers have passed ``tenant_for``)."""
    return [Contact(name, email) for name, email in repository.admin_contacts(db, tenant.id)]


_ASK_FOR = {"manage": "to do it for you, or to make you an admin",
            "operate": "to do it for you, or for the member role"}


def who_can_help(db: Session, tenant: Tenant, action: str) -> str:
    admins = admins_of(db, tenant)
    if not admins:
        return f"{tenant.slug!r} has no admin yet: ask a platform admin"
    ask_for = _ASK_FOR.get(action, "to do it for you")
    return f"ask an admin of {tenant.slug!r} ({', '.join(map(str, admins))}) {ask_for}"


def _visible_tenant(db: Session, principal: Principal, slug: str) -> Tenant | None:
    """The tenant, read once per session (a page asks several services for the same one)."""
    found: dict[str, Tenant] = db.info.setdefault("tenants_by_slug", {})
    tenant = found.get(slug)
    if tenant is None:
        tenant = _cached_tenant(db, slug)
        if tenant is None:
            return None
        found[slug] = tenant
    visible = principal.is_platform_admin or tenant.id in principal.roles
    return tenant if visible else None


class _TenantRow(NamedTuple):
    id: int
    slug: str
    display_name: str
    state: str
    created_at: datetime
    updated_at: datetime


def cache_tenants(database: Database, seconds: float) -> None:
    """Sessions of ``database`` remember tenants by slug for ``seconds`` (0: never)."""
    database.configure_sessions(info={_CACHE: ExpiringCache[_TenantRow](seconds)})


def _cached_tenant(db: Session, slug: str) -> Tenant | None:
    cache: ExpiringCache[_TenantRow] | None = db.info.get(_CACHE)
    row = cache.get(slug) if cache is not None else None
    if row is None:
        tenant = db.scalar(select(Tenant).where(Tenant.slug == slug))
        if tenant is not None and cache is not None and not changes_pending(db):
            cache.put(slug, _TenantRow(*(getattr(tenant, f) for f in _TenantRow._fields)))
        return tenant
    present = db.identity_map.get(identity_key(Tenant, row.id))
    if isinstance(present, Tenant):
        return present  # with whatever this session changed on it
    # Into this session as if it had been read here, without a query.
    copy = Tenant(**row._asdict())
    make_transient_to_detached(copy)
    return db.merge(copy, load=False)
