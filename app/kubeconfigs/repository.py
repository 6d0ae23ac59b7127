"""SQL for kubeconfig grants. Tenant visibility itself comes from ``app.authz``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Select, func, or_, select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.clusters.models import VirtualCluster
from app.database.concurrency import lock_rows
from app.kubeconfigs.models import KubeconfigGrant
from app.tenants.models import Membership, Tenant


def cluster_in_tenant(db: Session, tenant_id: int, name: str) -> VirtualCluster | None:
    return db.scalar(select(VirtualCluster).where(VirtualCluster.tenant_id == tenant_id,
                                                  VirtualCluster.name == name))


def grant_in_cluster(db: Session, cluster_id: int, grant_id: int, *,
                     lock: bool = False) -> KubeconfigGrant | None:
    query = select(KubeconfigGrant).where(KubeconfigGrant.cluster_id == cluster_id,
                                          KubeconfigGrant.id == grant_id)
    if lock:
        lock_rows(db, KubeconfigGrant, KubeconfigGrant.id == grant_id)
        query = query.with_for_update().execution_options(populate_existing=True)
    return db.scalar(query)


def active_grants_query(cluster_id: int, now: datetime,
                        user_id: int | None = None) -> Select[KubeconfigGrant]:
    query = select(KubeconfigGrant).where(
        KubeconfigGrant.cluster_id == cluster_id, KubeconfigGrant.revoked_at.is_(None),
        KubeconfigGrant.expires_at > now)
    if user_id is not None:
        query = query.where(KubeconfigGrant.user_id == user_id)
    return query


def revoked_grants(db: Session, cluster_id: int, user_id: int | None,
                   limit: int) -> Sequence[KubeconfigGrant]:
    """The latest revoked grants of a cluster, newest first (one user's when ``user_id``)."""
    query = select(KubeconfigGrant).where(KubeconfigGrant.cluster_id == cluster_id,
                                          KubeconfigGrant.revoked_at.is_not(None))
    if user_id is not None:
        query = query.where(KubeconfigGrant.user_id == user_id)
    order = (KubeconfigGrant.revoked_at.desc(), KubeconfigGrant.id.desc())
    return db.scalars(query.order_by(*order).limit(limit)).all()


def unrevoked_grants(db: Session, *, cluster_ids: Sequence[int],
                     user_id: int | None = None) -> Sequence[KubeconfigGrant]:
    """Grants not yet revoked (expired ones included: their Secrets still need deleting)."""
    query = select(KubeconfigGrant).where(KubeconfigGrant.cluster_id.in_(list(cluster_ids)),
                                          KubeconfigGrant.revoked_at.is_(None))
    if user_id is not None:
        query = query.where(KubeconfigGrant.user_id == user_id)
    return db.scalars(query.order_by(KubeconfigGrant.id)).all()


def cluster_ids_of_tenant(db: Session, tenant_id: int) -> list[int]:
    return list(db.scalars(select(VirtualCluster.id).where(VirtualCluster.tenant_id == tenant_id)))


def live_grants_of_service_account(db: Session, cluster_id: int, service_account: str,
                                   now: datetime) -> int:
    query = select(func.count()).select_from(KubeconfigGrant).where(
        KubeconfigGrant.cluster_id == cluster_id,
        KubeconfigGrant.service_account == service_account,
        KubeconfigGrant.revoked_at.is_(None), KubeconfigGrant.expires_at > now)
    return int(db.scalar(query) or 0)


def cleanup_ids(db: Session, now: datetime) -> list[int]:
    """Grants revoked or expired whose bound Secret may still exist."""
    query = (
        select(KubeconfigGrant.id)
        .where(KubeconfigGrant.secret_deleted_at.is_(None),
               or_(KubeconfigGrant.revoked_at.is_not(None), KubeconfigGrant.expires_at <= now))
        .order_by(KubeconfigGrant.id)
    )
    return list(db.scalars(query))


def users_by_id(db: Session, user_ids: set[int]) -> dict[int, User]:
    return {u.id: u for u in db.scalars(select(User).where(User.id.in_(list(user_ids))))}


def grant_place(db: Session, grant_id: int) -> tuple[str, str] | None:
    """The tenant slug and cluster name of a grant, whoever asks: callers scope it."""
    row = db.execute(
        select(Tenant.slug, VirtualCluster.name)
        .join(VirtualCluster, VirtualCluster.tenant_id == Tenant.id)
        .join(KubeconfigGrant, KubeconfigGrant.cluster_id == VirtualCluster.id)
        .where(KubeconfigGrant.id == grant_id)).first()
    return None if row is None else (row[0], row[1])


def cluster_by_id(db: Session, cluster_id: int) -> VirtualCluster | None:
    return db.get(VirtualCluster, cluster_id)


def grants_of_cluster(db: Session, cluster_id: int) -> Sequence[KubeconfigGrant]:
    return db.scalars(select(KubeconfigGrant).where(KubeconfigGrant.cluster_id == cluster_id)).all()


def tenant_role(db: Session, tenant_id: int, user_id: int) -> str | None:
    """The user's role in the tenant as committed now, not as the request began."""
    return db.scalar(select(Membership.role).where(Membership.tenant_id == tenant_id,
                                                   Membership.user_id == user_id))
