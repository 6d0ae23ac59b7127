"""Revocation beyond the revoke button: member removal, role changes, suspension, cluster
deletion, and the reconciler that deletes the bound Secrets, retrying when the API fails.

Member removal and expiry run on a real kube-apiserver standing in for the virtual cluster
(``virtual_api``, marked ``kube_server``). The other tests stay on the in-memory fake: the
cluster-deletion and back-off tests need the API to fail on demand (connection refused, a
503 with Retry-After, a 403), which a real server cannot be made to do, and the role-change,
suspension and registry tests observe only the database (the fake stands in for a connector
they never really use).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.clusters.models import VirtualCluster
from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kit.errors import Forbidden
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.errors import PermanentKubeError, TransientKubeError
from app.kube.memory import InMemoryKube
from app.kube.port import KubePort
from app.kubeconfigs import service
from app.kubeconfigs.models import KubeconfigGrant
from app.kubeconfigs.schemas import KubeconfigRequest
from app.kubeconfigs.service import VirtualClusters
from app.reconcilers.kubeconfigs import KubeconfigReconciler
from app.tenants import service as tenants
from app.tenants.schemas import MemberUpdate, TenantUpdate
from app.workqueue import KUBECONFIGS, enqueue
from app.workqueue import repository as queue
from tests.support.drive import run_due
from tests.support.kube import RecordingConnector
from tests.support.kubeconfigs import RBAC, objects_of_user
from tests.support.tenancy import Tenancy

NS = "gpu-tenant-portal"


@dataclass
class FakeClusters:
    """A connector whose every virtual cluster is one in-memory fake."""

    kube: InMemoryKube = field(default_factory=InMemoryKube)

    def host(self) -> KubePort | None:
        return None

    def virtual(self, kubeconfig_yaml: str) -> KubePort:
        return self.kube

    def ready(self, kubeconfig_yaml: str) -> bool:
        return True


def issue(db: Session, tenancy: Tenancy, clusters: VirtualClusters, settings: Settings,
          who: str = "acme_member", role: str = "view") -> KubeconfigGrant:
    principal = tenancy.principal(getattr(tenancy, who))
    issued = service.issue_kubeconfig(db, principal, clusters, settings, "acme", "train",
                                      KubeconfigRequest(role=role, lifetime_seconds=3600))
    assert issued is not None
    grant = db.get(KubeconfigGrant, issued.grant.id)
    assert grant is not None
    return grant


def secret_exists(kube: KubePort, grant: KubeconfigGrant) -> bool:
    if isinstance(kube, InMemoryKube):
        return any(o["metadata"]["name"] == grant.secret_name for o in kube.objects("Secret"))
    return kube.get("v1", "Secret", grant.secret_name, NS) is not None


@pytest.mark.kube_server
def test_removing_a_member_revokes_their_grants_and_the_worker_deletes_the_secrets(
    db: Session, database: Database, settings: Settings, tenancy: Tenancy,
    train: VirtualCluster, virtual: KubernetesAdapter,
) -> None:
    connector = RecordingConnector(ClientConnector(settings))
    clusters = VirtualClusters.from_settings(settings, connector)
    grant, other = issue(db, tenancy, clusters, settings), issue(db, tenancy, clusters, settings,
                                                                 "acme_viewer")
    member = next(m for m in tenancy.memberships if m.user_id == tenancy.acme_member.id)
    tenants.remove_member(db, tenancy.principal(tenancy.acme_admin), "acme", member.id)
    db.commit()
    assert grant.revoked_at is not None and grant.revoke_reason == "member-removed"
    assert other.revoked_at is None
    assert secret_exists(virtual, grant)  # revoked at once, deleted by the worker

    reconciler = KubeconfigReconciler(settings, database, clusters)
    assert run_due(reconciler, "w1") == 1
    requests = len(connector.calls)
    assert run_due(reconciler, "w1") == 0  # level-triggered: the second pass changes nothing
    assert len(connector.calls) == requests
    assert not secret_exists(virtual, grant) and secret_exists(virtual, other)
    assert virtual.get("v1", "ServiceAccount", grant.service_account, NS) is None
    db.expire_all()
    assert grant.secret_deleted_at is not None


def test_a_lower_role_revokes_the_grants_it_would_not_get_any_more(
    db: Session, settings: Settings, tenancy: Tenancy, offline_train: VirtualCluster,
) -> None:
    clusters = VirtualClusters.from_settings(settings, FakeClusters())
    edit_grant = issue(db, tenancy, clusters, settings, "acme_member", "edit")
    view_grant = issue(db, tenancy, clusters, settings, "acme_member", "view")
    member = next(m for m in tenancy.memberships if m.user_id == tenancy.acme_member.id)
    tenants.change_role(db, tenancy.principal(tenancy.acme_admin), "acme", member.id,
                        MemberUpdate(role="viewer"))
    assert edit_grant.revoke_reason == "role-changed" and view_grant.revoked_at is None


def test_suspending_a_tenant_or_deleting_a_cluster_revokes_every_grant_with_an_audit_row(
    db: Session, settings: Settings, tenancy: Tenancy, offline_train: VirtualCluster,
) -> None:
    fake = FakeClusters()
    clusters = VirtualClusters.from_settings(settings, fake)
    first, second = issue(db, tenancy, clusters, settings), issue(db, tenancy, clusters,
                                                                  settings, "acme_admin")
    tenants.update_tenant(db, tenancy.principal(tenancy.platform_admin), "acme",
                          TenantUpdate(state="suspended"))
    assert {first.revoke_reason, second.revoke_reason} == {"tenant-suspended"}
    revokes = db.scalars(select(AuditEvent.target_id).where(
        AuditEvent.action == "kubeconfig.revoke")).all()
    assert sorted(revokes) == sorted([str(first.id), str(second.id)])
    assert service.revoke_grants_for_cluster(
        db, offline_train.id, actor_label="cluster-reconciler") == 0
    with pytest.raises(Forbidden, match="suspended"):
        service.issue_kubeconfig(db, tenancy.principal(tenancy.acme_admin), clusters, settings,
                                 "acme", "train", KubeconfigRequest())


def test_deleting_a_cluster_revokes_its_grants_and_the_worker_gives_up_on_its_dying_api(
    db: Session, database: Database, settings: Settings, tenancy: Tenancy,
    offline_train: VirtualCluster,
) -> None:
    fake = FakeClusters()
    clusters = VirtualClusters.from_settings(settings, fake)
    grant = issue(db, tenancy, clusters, settings)
    assert service.revoke_grants_for_cluster(
        db, offline_train.id, actor_label="cluster-reconciler") == 1
    offline_train.deletion_requested_at = utcnow()
    db.commit()
    fake.kube.inject("delete", OSError("connection refused"), times=10)
    assert run_due(KubeconfigReconciler(settings, database, clusters), "w1") == 1
    db.expire_all()
    assert grant.revoke_reason == "cluster-deleted" and grant.secret_deleted_at is not None
    assert service.forget_grants_for_cluster(db, offline_train.id) == 1


def test_the_worker_backs_off_on_failures_and_deletes_the_secret_once_the_api_answers(
    db: Session, database: Database, settings: Settings, tenancy: Tenancy,
    offline_train: VirtualCluster,
) -> None:
    fake = FakeClusters()
    clusters = VirtualClusters.from_settings(settings, fake)
    grant = issue(db, tenancy, clusters, settings)
    fake.kube.inject("delete", TransientKubeError("busy", delay_seconds=30), times=1)
    service.revoke_grant(db, tenancy.principal(tenancy.acme_member), clusters, "acme", "train",
                         grant.id)
    db.commit()
    assert grant.revoked_at is not None and grant.secret_deleted_at is None
    assert secret_exists(fake.kube, grant)

    # The worker's clock holds still: the first backoff is 1 to 2 s, which a loaded machine
    # spends between two lines of this test.
    held = [utcnow()]
    reconciler = KubeconfigReconciler(settings, database, clusters, clock=lambda: held[0])
    fake.kube.inject("delete", PermanentKubeError("forbidden", reason="Forbidden"), times=1)
    assert run_due(reconciler, "w1") == 1  # one attempt, failed
    db.expire_all()
    assert grant.secret_deleted_at is None
    [item] = queue.items(db, KUBECONFIGS)
    assert item.key == str(grant.id)
    assert item.attempts == 1 and "Forbidden" in (item.last_error or "")
    assert item.due_at > held[0]
    calls = len(fake.kube.calls)
    assert run_due(reconciler, "w1") == 0 and len(fake.kube.calls) == calls  # backing off

    enqueue(db, KUBECONFIGS, grant.id)  # due now: as if the backoff had run out
    db.commit()
    held[0] = utcnow()
    assert run_due(reconciler, "w1") == 1
    assert not secret_exists(fake.kube, grant)
    db.expire_all()
    assert grant.secret_deleted_at is not None
    assert queue.items(db, KUBECONFIGS) == []  # done with: the queue forgets it


def test_the_server_hint_sets_the_retry_of_a_failed_clean_up(
    db: Session, database: Database, settings: Settings, tenancy: Tenancy,
    offline_train: VirtualCluster,
) -> None:
    fake = FakeClusters()
    clusters = VirtualClusters.from_settings(settings, fake)
    grant = issue(db, tenancy, clusters, settings)
    grant.expires_at = utcnow() - timedelta(seconds=1)  # expiry enqueues nothing: the resync
    db.commit()
    fake.kube.inject("delete", TransientKubeError("busy", delay_seconds=120), times=1)
    assert run_due(KubeconfigReconciler(settings, database, clusters), "w1") == 1
    [item] = queue.items(db, KUBECONFIGS)
    assert item.attempts == 1 and item.last_error == "Transient: busy"
    assert item.due_at > utcnow() + timedelta(seconds=100)


def test_every_revocation_enqueues_its_grant_due_at_once(
    db: Session, settings: Settings, tenancy: Tenancy, offline_train: VirtualCluster,
) -> None:
    """By a user, by a member's removal, by a tenant's suspension: the clean-up is queued in
    the revoking transaction, due now, not at the next resync."""
    fake = FakeClusters()
    clusters = VirtualClusters.from_settings(settings, fake)
    own, removed = issue(db, tenancy, clusters, settings), issue(db, tenancy, clusters, settings)
    admins = issue(db, tenancy, clusters, settings, "acme_admin")
    assert queue.items(db, KUBECONFIGS) == []  # a live grant is nobody's work yet
    before = utcnow()

    fake.kube.inject("delete", TransientKubeError("busy"), times=1)
    service.revoke_grant(db, tenancy.principal(tenancy.acme_member), clusters, "acme", "train",
                         own.id)
    member = next(m for m in tenancy.memberships if m.user_id == tenancy.acme_member.id)
    tenants.remove_member(db, tenancy.principal(tenancy.acme_admin), "acme", member.id)
    tenants.update_tenant(db, tenancy.principal(tenancy.platform_admin), "acme",
                          TenantUpdate(state="suspended"))
    assert removed.revoke_reason == "member-removed"
    assert admins.revoke_reason == "tenant-suspended"
    items = {item.key: item for item in queue.items(db, KUBECONFIGS)}
    assert set(items) == {str(own.id), str(removed.id), str(admins.id)}
    assert all(item.due_at <= utcnow() and item.due_at >= before - timedelta(seconds=1)
               for item in items.values())
    db.rollback()
    assert queue.items(db, KUBECONFIGS) == []  # with its transaction, or not at all


@pytest.mark.kube_server
def test_expired_grants_lose_their_secret_and_the_account_goes_with_its_last_live_grant(
    db: Session, database: Database, settings: Settings, tenancy: Tenancy,
    train: VirtualCluster, virtual: KubernetesAdapter,
) -> None:
    clusters = VirtualClusters.from_settings(settings, ClientConnector(settings))
    expired, live = issue(db, tenancy, clusters, settings), issue(db, tenancy, clusters, settings)
    binding = f"{NS}:{live.service_account}"
    expired.expires_at = utcnow() - timedelta(seconds=1)
    db.commit()
    reconciler = KubeconfigReconciler(settings, database, clusters)
    assert run_due(reconciler, "w1") == 1
    assert not secret_exists(virtual, expired) and secret_exists(virtual, live)
    # The account stays, still used by the live grant.
    assert virtual.get("v1", "ServiceAccount", live.service_account, NS) is not None
    assert virtual.get(RBAC, "ClusterRoleBinding", binding) is not None

    live.expires_at = utcnow() - timedelta(seconds=1)
    db.commit()
    assert run_due(reconciler, "w1") == 1
    assert virtual.get("v1", "ServiceAccount", live.service_account, NS) is None
    assert virtual.get(RBAC, "ClusterRoleBinding", binding) is None
    assert objects_of_user(virtual, tenancy.acme_member.id) == []


def test_the_worker_runs_the_kubeconfig_reconciler(database: Database, settings: Settings) -> None:
    from app.process.worker import build_kinds

    names = [r.name for r in build_kinds(settings, database, FakeClusters())]
    assert "kubeconfigs" in names
