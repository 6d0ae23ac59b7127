"""What the cluster page's kubeconfig panel shows: who may issue which kubeconfig for how long,
the grants in force and those revoked lately (and why)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy.orm import Session

from app.auth.models import User
from app.auth.principal import Principal
from app.clusters.models import VirtualCluster
from app.http.pagination import PageParams
from app.kit.config import Settings
from app.kit.errors import ProblemError
from app.kubeconfigs import repository, rules, service
from app.kubeconfigs.models import KubeconfigGrant
from app.kubeconfigs.schemas import GrantOut
from app.tenants.models import Tenant

LIFETIME_PRESETS = (600, 3600, 4 * 3600, 8 * 3600, 12 * 3600, 24 * 3600, 7 * 24 * 3600)


# How many revoked grants the panel keeps in sight (the audit log has them all).
REVOKED_SHOWN = 20
# Why the portal revoked a grant that nobody revoked by hand (reason "user").
REVOKED_BECAUSE = {
    "member-removed": "its holder left the tenant",
    "role-changed": "its holder's role changed",
    "tenant-suspended": "the tenant was suspended",
    "cluster-deleted": "the cluster was deleted",
}


@dataclass(frozen=True)
class RevokedGrant:
    grant: GrantOut
    revoked_at: datetime
    revoked_by: str
    because: str


@dataclass(frozen=True)
class KubeconfigPanel:
    tenant: str
    cluster: str
    issuable: bool
    why_not: str
    roles: tuple[str, ...]
    lifetimes: tuple[int, ...]
    default_lifetime: int
    grants: list[GrantOut]
    revoke_any: bool
    user_id: int
    revoked: list[RevokedGrant]


def kubeconfig_panel(db: Session, principal: Principal, settings: Settings, slug: str,
                     name: str) -> KubeconfigPanel:
    tenant, cluster = rules.cluster_for(db, principal, slug, name)
    default, maximum = rules.lifetime_bounds(settings)
    why_not = ""
    try:
        rules.ensure_may_issue(principal, tenant, "view")
        rules.ensure_issuable(cluster)
    except ProblemError as error:
        why_not = error.detail
    lifetimes = sorted({t for t in LIFETIME_PRESETS if t <= maximum} | {default, maximum})
    grants = service.list_active_grants(db, principal, slug, name, PageParams(limit=200)).items
    return KubeconfigPanel(
        tenant=tenant.slug, cluster=cluster.name, issuable=not why_not, why_not=why_not,
        roles=rules.allowed_roles(principal, tenant), lifetimes=tuple(lifetimes),
        default_lifetime=default, grants=grants,
        revoke_any=rules.is_tenant_admin(principal, tenant), user_id=principal.user_id,
        revoked=_recently_revoked(db, principal, tenant, cluster))


def _recently_revoked(db: Session, principal: Principal, tenant: Tenant,
                      cluster: VirtualCluster) -> list[RevokedGrant]:
    """What was revoked lately, and by whom: everyone's for a tenant admin, else one's own."""
    only_user = None if rules.is_tenant_admin(principal, tenant) else principal.user_id
    rows = repository.revoked_grants(db, cluster.id, only_user, REVOKED_SHOWN)
    people = {g.user_id for g in rows} | {g.revoked_by_id for g in rows if g.revoked_by_id}
    users = repository.users_by_id(db, people)
    return [RevokedGrant(grant=service.grant_out(g, cluster, users[g.user_id]),
                         revoked_at=cast(datetime, g.revoked_at),
                         revoked_by=_revoker(g, users),
                         because=REVOKED_BECAUSE.get(g.revoke_reason or "", "")) for g in rows]


def _revoker(grant: KubeconfigGrant, users: dict[int, User]) -> str:
    revoker = users.get(grant.revoked_by_id) if grant.revoked_by_id else None
    return (revoker.name or revoker.email) if revoker is not None else "the portal"
