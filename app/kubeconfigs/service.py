"""Kubeconfig grants: issue, list and revoke. Callers own the transaction; all audited.

Issuing makes, inside the virtual cluster and with its stored admin credential, a ServiceAccount
per user and role, its ClusterRoleBinding, one Secret per grant and a TokenRequest bound to that
Secret (see ``app.kubeconfigs.manifests``). Before those it applies, idempotently, the portal's
edit ClusterRole and the admission policy that keeps non-admins out of the portal namespace
(``app.kubeconfigs.guard``). The token goes into the returned YAML and nowhere
else: not the database, not the audit trail, not the logs.

Revoking marks the grant at once (the portal treats it as revoked from then on). A request that
revokes deletes the bound Secret once synchronously; otherwise (a membership, a suspension, a
cluster's deletion) or on failure, the grant's clean-up is queued in the same transaction (kind
``kubeconfigs``, key the grant's id, due at once) and the worker's kubeconfig kind
(``app.reconcilers.kubeconfigs``) deletes it, retrying with the queue's backoff; it also sweeps
the Secrets of expired grants. The ServiceAccount (and its binding) goes with
the last live grant that used it.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy.orm import Session

from app.audit import readable
from app.audit import service as audit
from app.auth.models import User
from app.auth.principal import Principal
from app.authz.scoping import TenantHidden
from app.clusters import service as cluster_service
from app.clusters.models import VirtualCluster
from app.database.concurrency import lock_row
from app.database.core import utcnow
from app.http.pagination import Page, PageParams, paginate
from app.kit.config import Settings
from app.kit.crypto import SecretBox
from app.kit.errors import (
    Conflict,
    Forbidden,
    NotFound,
    ProblemError,
    ServiceUnavailable,
)
from app.kube.connector import KubeConnector
from app.kube.errors import KubeError, TransientKubeError
from app.kube.port import KubePort
from app.kubeconfigs import guard, manifests, repository, rules
from app.kubeconfigs.manifests import PORTAL_NAMESPACE, GrantSpec, KubeconfigSpec
from app.kubeconfigs.models import KubeconfigGrant
from app.kubeconfigs.schemas import GrantOut, IssuedKubeconfig, KubeconfigRequest, KubeconfigRole
from app.tenants.models import Tenant
from app.workqueue import KUBECONFIGS, enqueue, enqueue_many

log = logging.getLogger(__name__)

WORKER_LABEL = "kubeconfig-reconciler"
RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"
SIMULATED_NOTICE = (
    "SIMULATED HOST: issued by `portal dev` on its in-memory demo fleet.",
    "Its server (under simulated-host.invalid) does not exist: kubectl cannot connect.",
)


@dataclass(frozen=True)
class VirtualClusters:
    """How the portal reaches a virtual cluster: the connector and the key of stored secrets."""

    kube: KubeConnector
    box: SecretBox

    @classmethod
    def from_settings(cls, settings: Settings, kube: KubeConnector) -> VirtualClusters:
        return cls(kube=kube, box=SecretBox.from_settings(settings))

    def admin_kubeconfig(self, cluster: VirtualCluster) -> str:
        if cluster.admin_kubeconfig_encrypted is None:
            raise Conflict(f"cluster {cluster.name!r} has no credential yet: wait until Ready")
        return self.box.open(cluster.admin_kubeconfig_encrypted)

    def port(self, cluster: VirtualCluster) -> KubePort:
        return self.kube.virtual(self.admin_kubeconfig(cluster))


# ----- issue


def issue_kubeconfig(db: Session, principal: Principal, clusters: VirtualClusters,
                     settings: Settings, slug: str, name: str,
                     payload: KubeconfigRequest) -> IssuedKubeconfig | None:
    """The kubeconfig; None when the cluster sleeps or is still waking up: asking for one
    wakes it (audited), and the caller asks again once it is Ready."""
    tenant, cluster = rules.cluster_for(db, principal, slug, name)
    rules.ensure_may_issue(principal, tenant, payload.role)
    rules.ensure_still_may_issue(db, principal, tenant, payload.role)
    if cluster_service.wake_for_use(db, principal, cluster) or rules.is_waking(cluster):
        return None
    lifetime = rules.lifetime(settings, payload.lifetime_seconds)
    rules.ensure_issuable(cluster)
    admin_yaml = clusters.admin_kubeconfig(cluster)
    # Serialises with the reconciler's "last grant gone, delete the ServiceAccount" step.
    lock_row(db, User, principal.user_id)
    grant, spec = _new_grant(db, principal, cluster, payload.role, lifetime)
    token = _make_token(clusters.kube.virtual(admin_yaml), spec, lifetime,
                        guard.portal_identity(admin_yaml))
    _audit(db, principal.user_id, principal.label, tenant.id, "kubeconfig.issue", grant,
           after=_grant_facts(grant, cluster, principal.email))
    server, ca_data = manifests.admin_endpoint(admin_yaml)
    cluster_entry, context, notice = _names_and_notice(settings, tenant, cluster, grant.role)
    text = manifests.kubeconfig_yaml(KubeconfigSpec(
        cluster=cluster_entry, context=context, server=cluster.endpoint or server,
        ca_data=ca_data, user=context, token=token, notice=notice))
    log.info("kubeconfig grant %d issued: %s for user %d until %s", grant.id, context,
             grant.user_id, grant.expires_at.isoformat())
    return IssuedKubeconfig(grant=grant_out(grant, cluster, principal.user),
                            yaml=text, filename=f"{context}.kubeconfig.yaml")


def _names_and_notice(settings: Settings, tenant: Tenant, cluster: VirtualCluster,
                      role: str) -> tuple[str, str, tuple[str, ...]]:
    """The cluster entry's name and the context's (the user's too), and the file's header.

    The role is in the context and user names, so a view and an admin kubeconfig of one
    cluster merged into one file sit side by side instead of one repointing the other; on the
    simulated host the names and the header say so."""
    suffix, notice = ("-simulated", SIMULATED_NOTICE) if settings.simulated_host else ("", ())
    base = f"{tenant.slug}-{cluster.name}"
    return f"{base}{suffix}", f"{base}-{role}{suffix}", notice


def _new_grant(db: Session, principal: Principal, cluster: VirtualCluster, role: str,
               lifetime: int) -> tuple[KubeconfigGrant, GrantSpec]:
    now = utcnow()
    service_account = manifests.service_account_name(principal.user_id, role)
    suffix = secrets.token_hex(4)
    grant = KubeconfigGrant(
        user_id=principal.user_id, cluster_id=cluster.id, role=role,
        service_account=service_account,
        secret_name=manifests.secret_name(service_account, suffix),
        created_at=now, expires_at=now + timedelta(seconds=lifetime))
    db.add(grant)
    db.flush()
    spec = GrantSpec(grant_id=grant.id, user_id=principal.user_id, user_email=principal.email,
                     role=role, secret_suffix=suffix, expires_at=grant.expires_at)
    return grant, spec


def _make_token(port: KubePort, spec: GrantSpec, lifetime: int,
                portal: guard.PortalIdentity) -> str:
    try:
        _prepare_cluster(port, portal)
        _drop_stale_binding(port, spec)
        for obj in manifests.grant_objects(spec):
            port.apply(obj, force=True)
        return port.request_token(PORTAL_NAMESPACE, spec.service_account,
                                  expiration_seconds=lifetime, bound_secret=spec.secret_name)
    except KubeError as error:
        _forget_secret(port, spec.secret_name)
        raise _as_problem(error) from error


def _prepare_cluster(port: KubePort, portal: guard.PortalIdentity) -> None:
    """The edit role and the namespace guard, before any grant object (idempotent)."""
    for obj in guard.guard_objects(portal):
        port.apply(obj, force=True)


def _drop_stale_binding(port: KubePort, spec: GrantSpec) -> None:
    """A binding's roleRef cannot change: one made before the portal's edit role goes first."""
    wanted = manifests.role_binding(spec)
    name = wanted["metadata"]["name"]
    live = port.get(RBAC_API_VERSION, "ClusterRoleBinding", name)
    if live is not None and live.get("roleRef") != wanted["roleRef"]:
        port.delete(RBAC_API_VERSION, "ClusterRoleBinding", name)


def _forget_secret(port: KubePort, secret_name: str) -> None:
    """The grant row rolls back with the failed request; its Secret should not linger."""
    try:
        port.delete("v1", "Secret", secret_name, PORTAL_NAMESPACE)
    except KubeError:
        log.warning("could not delete Secret %s after a failed issue", secret_name)


def _as_problem(error: KubeError) -> ProblemError:
    if isinstance(error, TransientKubeError):
        return ServiceUnavailable(
            f"the virtual cluster's API did not answer ({error.reason}); try again shortly")
    return ProblemError.with_status(
        502, "Bad gateway", f"the virtual cluster refused the request: {error.message}")


# ----- list


def list_active_grants(db: Session, principal: Principal, slug: str, name: str,
                       params: PageParams) -> Page[GrantOut]:
    """Everyone's live grants for a tenant admin; one's own for anyone else."""
    tenant, cluster = rules.cluster_for(db, principal, slug, name)
    only_user = None if rules.is_tenant_admin(principal, tenant) else principal.user_id
    query = repository.active_grants_query(cluster.id, utcnow(), only_user)
    rows, cursor = paginate(db, query, KubeconfigGrant.id, params)
    users = repository.users_by_id(db, {g.user_id for g in rows})
    return Page(items=[grant_out(g, cluster, users[g.user_id]) for g in rows],
                next_cursor=cursor)


# ----- revoke


def revoke_grant(db: Session, principal: Principal, clusters: VirtualClusters, slug: str,
                 name: str, grant_id: int) -> GrantOut:
    """Own grants, or any grant of the tenant for its admins; revoking twice is a no-op."""
    tenant, cluster = rules.cluster_for(db, principal, slug, name)
    if not principal.can_write():
        raise Forbidden("this API token is read-only")
    # Locked: of revokes of one grant at once, the first revokes (and audits), the others
    # find it revoked.
    grant = repository.grant_in_cluster(db, cluster.id, grant_id, lock=True)
    if grant is None:
        raise NotFound(f"no kubeconfig grant {grant_id} on {slug}/{name}")
    if grant.user_id != principal.user_id and not rules.is_tenant_admin(principal, tenant):
        raise Forbidden("you may revoke your own kubeconfigs only")
    if grant.revoked_at is None:
        _mark_revoked(db, grant, "user", tenant.id, principal.user_id, principal.label)
        db.flush()
        _try_cleanup_now(db, grant, cluster, clusters, principal.label)
        if grant.secret_deleted_at is None:
            enqueue(db, KUBECONFIGS, grant.id)
    user = repository.users_by_id(db, {grant.user_id})[grant.user_id]
    return grant_out(grant, cluster, user)


def revoke_grant_by_id(db: Session, principal: Principal, clusters: VirtualClusters,
                       grant_id: int) -> GrantOut:
    """A grant by its id alone (ids are global), under the same rules as ``revoke_grant``; a
    grant in a tenant the caller may not see is not found, and its tenant not named."""
    place = repository.grant_place(db, grant_id)
    try:
        if place is None:
            raise NotFound(f"no kubeconfig grant {grant_id}")
        return revoke_grant(db, principal, clusters, *place, grant_id)
    except TenantHidden:
        raise TenantHidden(f"no kubeconfig grant {grant_id}") from None


def _try_cleanup_now(db: Session, grant: KubeconfigGrant, cluster: VirtualCluster,
                     clusters: VirtualClusters, actor_label: str) -> None:
    """One attempt; on failure the worker retries (the grant is already revoked)."""
    if cluster.admin_kubeconfig_encrypted is None:
        return
    try:
        _delete_grant_objects(db, grant, clusters.port(cluster), utcnow())
    except KubeError as error:
        log.warning("Secret of kubeconfig grant %d not deleted yet (%s); the worker retries",
                    grant.id, error.reason)
        return
    _finish_cleanup(db, grant, cluster, actor_label, "deleted")


def revoke_grants_for_cluster(db: Session, cluster_id: int, *, actor_label: str,
                              actor_id: int | None = None) -> int:
    """Every unrevoked grant of a cluster being deleted; returns how many."""
    cluster = repository.cluster_by_id(db, cluster_id)
    if cluster is None:
        return 0
    grants = repository.unrevoked_grants(db, cluster_ids=[cluster_id])
    return _revoke_all(db, grants, "cluster-deleted", cluster.tenant_id, actor_id, actor_label)


def revoke_grants_for_member(db: Session, tenant_id: int, user_id: int, *,
                             actor_id: int | None, actor_label: str,
                             reason: str = "member-removed") -> int:
    grants = repository.unrevoked_grants(
        db, cluster_ids=repository.cluster_ids_of_tenant(db, tenant_id), user_id=user_id)
    return _revoke_all(db, grants, reason, tenant_id, actor_id, actor_label)


def revoke_grants_for_tenant(db: Session, tenant_id: int, *, actor_id: int | None,
                             actor_label: str, reason: str = "tenant-suspended") -> int:
    grants = repository.unrevoked_grants(
        db, cluster_ids=repository.cluster_ids_of_tenant(db, tenant_id))
    return _revoke_all(db, grants, reason, tenant_id, actor_id, actor_label)


def revoke_grants_above_role(db: Session, tenant_id: int, user_id: int, tenant_role: str, *,
                             actor_id: int | None, actor_label: str) -> int:
    """After a role change: grants the user's new tenant role would not get any more."""
    allowed = rules.ROLES_BY_TENANT_ROLE.get(tenant_role, ())
    grants = [g for g in repository.unrevoked_grants(
        db, cluster_ids=repository.cluster_ids_of_tenant(db, tenant_id), user_id=user_id)
        if g.role not in allowed]
    return _revoke_all(db, grants, "role-changed", tenant_id, actor_id, actor_label)


def on_membership_changed(db: Session, tenant_id: int, user_id: int, role: str | None, *,
                          actor_id: int | None, actor_label: str) -> int:
    """The one call for membership changes: removal (``role`` None) or a new role."""
    if role is None:
        return revoke_grants_for_member(db, tenant_id, user_id, actor_id=actor_id,
                                        actor_label=actor_label)
    return revoke_grants_above_role(db, tenant_id, user_id, role, actor_id=actor_id,
                                    actor_label=actor_label)


def forget_grants_for_cluster(db: Session, cluster_id: int) -> int:
    """Deletes the grant rows of a cluster whose row is about to go (they reference it).

    Call only after ``revoke_grants_for_cluster`` and the release's uninstall: the audit trail
    keeps every issue and revocation.
    """
    grants = repository.grants_of_cluster(db, cluster_id)
    for grant in grants:
        db.delete(grant)
    db.flush()
    return len(grants)


def _revoke_all(db: Session, grants: Sequence[KubeconfigGrant], reason: str, tenant_id: int,
                actor_id: int | None, actor_label: str) -> int:
    for grant in grants:
        _mark_revoked(db, grant, reason, tenant_id, actor_id, actor_label)
    # Their Secrets go in the worker, due at once, or with this transaction not at all.
    enqueue_many(db, KUBECONFIGS, [grant.id for grant in grants])
    db.flush()
    return len(grants)


def _mark_revoked(db: Session, grant: KubeconfigGrant, reason: str, tenant_id: int,
                  actor_id: int | None, actor_label: str) -> None:
    grant.revoked_at = utcnow()
    grant.revoked_by_id = actor_id
    grant.revoke_reason = reason
    _audit(db, actor_id, actor_label, tenant_id, "kubeconfig.revoke", grant,
           before={"revoked_at": None},
           after={"revoked_at": grant.revoked_at.isoformat(), "reason": reason,
                  "user_id": grant.user_id, "role": grant.role,
                  "secret_name": grant.secret_name})


# ----- cleanup of bound Secrets (the worker's step, also tried once on revoke)


def clean_up_grant(db: Session, grant_id: int, clusters: VirtualClusters,
                   now: datetime) -> bool:
    """Deletes a revoked or expired grant's Secret if it may still exist; True when it did,
    False when there was nothing to do. A KubeError means it is still there: the caller
    retries (the worker's queue backs off, by the server's hint when there is one)."""
    grant = lock_row(db, KubeconfigGrant, grant_id)
    if grant is None or not _needs_cleanup(grant, now):
        return False
    cluster = repository.cluster_by_id(db, grant.cluster_id)
    assert cluster is not None  # a grant's foreign key keeps its cluster
    if cluster.admin_kubeconfig_encrypted is None:
        _finish_cleanup(db, grant, cluster, WORKER_LABEL, "cluster has no credential")
        return True
    try:
        _delete_grant_objects(db, grant, clusters.port(cluster), now)
    except KubeError as error:
        if cluster.deletion_requested_at is not None:
            # Its API goes with the release, and every token with it.
            _finish_cleanup(db, grant, cluster, WORKER_LABEL, "cluster being deleted")
            return True
        log.warning("kubeconfig grant %d: Secret not deleted (%s)", grant.id, error.reason)
        raise
    _finish_cleanup(db, grant, cluster, WORKER_LABEL, "deleted")
    return True


def _needs_cleanup(grant: KubeconfigGrant, now: datetime) -> bool:
    ended = grant.revoked_at is not None or grant.expires_at <= now
    return ended and grant.secret_deleted_at is None


def _delete_grant_objects(db: Session, grant: KubeconfigGrant, port: KubePort,
                          now: datetime) -> None:
    port.delete("v1", "Secret", grant.secret_name, PORTAL_NAMESPACE)
    lock_row(db, User, grant.user_id)
    if repository.live_grants_of_service_account(db, grant.cluster_id, grant.service_account,
                                                 now) == 0:
        port.delete(RBAC_API_VERSION, "ClusterRoleBinding",
                    manifests.binding_name(grant.service_account))
        port.delete("v1", "ServiceAccount", grant.service_account, PORTAL_NAMESPACE)


def _finish_cleanup(db: Session, grant: KubeconfigGrant, cluster: VirtualCluster,
                    actor_label: str, outcome: str) -> None:
    grant.secret_deleted_at = utcnow()
    _audit(db, None, actor_label, cluster.tenant_id, "kubeconfig.secret_deleted", grant,
           before={"secret_name": grant.secret_name},
           after={"outcome": outcome, "reason": grant.revoke_reason or "expired"})
    db.flush()


# ----- shapes and audit


def _grant_facts(grant: KubeconfigGrant, cluster: VirtualCluster, email: str) -> dict[str, Any]:
    return {"cluster": cluster.name, "user_id": grant.user_id, "user": email,
            "role": grant.role, "service_account": grant.service_account,
            "secret_name": grant.secret_name, "expires_at": grant.expires_at.isoformat()}


def grant_out(grant: KubeconfigGrant, cluster: VirtualCluster, user: User) -> GrantOut:
    return GrantOut(id=grant.id, cluster=cluster.name, user_id=grant.user_id,
                    user_email=user.email, user_name=user.name or user.email,
                    role=cast(KubeconfigRole, grant.role),
                    service_account=grant.service_account, created_at=grant.created_at,
                    expires_at=grant.expires_at, revoked_at=grant.revoked_at,
                    revoke_reason=grant.revoke_reason)


def _audit(db: Session, actor_id: int | None, actor_label: str, tenant_id: int, action: str,
           grant: KubeconfigGrant, before: dict[str, Any] | None = None,
           after: dict[str, Any] | None = None) -> None:
    audit.record(db, action=action, actor_id=actor_id, actor_label=actor_label,
                 tenant_id=tenant_id, target_type="kubeconfig_grant", target_id=grant.id,
                 target_label=_grant_label(db, grant), before=before, after=after)


def _grant_label(db: Session, grant: KubeconfigGrant) -> str:
    """The grant as people say it: "view kubeconfig #7 of alice@example.com for cluster
    train" (the session holds both rows already wherever a grant changes)."""
    user, cluster = db.get(User, grant.user_id), db.get(VirtualCluster, grant.cluster_id)
    whose = f" of {user.email}" if user else ""
    where = f" for {readable.cluster_label(cluster.name)}" if cluster else ""
    return f"{grant.role} kubeconfig #{grant.id}{whose}{where}"
