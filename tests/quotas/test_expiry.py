"""Quotas with an end date expire: GPUs go back, clusters above the new quota are flagged."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.quotas.models import BurstPolicy, QuotaRequest, TenantQuota
from app.quotas.schemas import ApproveIn, QuotaRequestCreate
from app.quotas.service import approve, create_request, expire_quotas
from app.reconcilers.quota_expiry import QuotaExpiryReconciler
from app.workqueue import CLUSTERS, QUOTA_EXPIRY, TENANT_QUEUES, tenant_queue_key
from app.workqueue import repository as queue
from app.workqueue.models import WorkItem
from tests import factories
from tests.support.drive import run_due
from tests.support.kube import InMemoryConnector
from tests.support.tenancy import Tenancy, build_tenancy


def _approved(db: Session, t: Tenancy, gpus: int, days: int | None) -> QuotaRequest:
    ends_at = utcnow() + timedelta(days=days) if days else None
    created = create_request(db, t.principal(t.acme_admin), Settings(env="test"), "acme",
                             QuotaRequestCreate(gpu_class_id=t.h100.id, gpus=gpus,
                                                reason="burst", ends_at=ends_at))
    approve(db, t.principal(t.platform_admin), created.id, ApproveIn())
    request = db.get(QuotaRequest, created.id)
    assert request is not None
    return request


def test_expiry_takes_back_the_gpus_and_flags_clusters_over_quota(db: Session) -> None:
    t = build_tenancy(db)
    _approved(db, t, 4, days=None)
    burst = _approved(db, t, 8, days=7)
    host = factories.host_cluster(db)
    big = factories.cluster(db, t.acme, host, "big", gpu_class_id=t.h100.id, gpus=10)
    small = factories.cluster(db, t.acme, host, "small", gpu_class_id=t.h100.id, gpus=1)
    assert expire_quotas(db, utcnow()) == []
    expired = expire_quotas(db, utcnow() + timedelta(days=8))
    assert [(e.request_id, e.gpus) for e in expired] == [(burst.id, 8)]
    assert sorted(expired[0].over_quota_cluster_ids) == sorted([big.id, small.id])
    db.refresh(burst)
    assert burst.state == "expired"
    quota = db.scalar(select(TenantQuota).where(TenantQuota.tenant_id == t.acme.id))
    assert quota is not None and quota.gpus == 4
    assert big.over_quota and small.over_quota
    assert db.get(type(big), big.id) is not None  # flagged, never deleted
    actions = list(db.scalars(select(AuditEvent.action).where(
        AuditEvent.actor_label == "quota-expiry").order_by(AuditEvent.id)))
    assert actions == ["quota_request.expire", "tenant_quota.change",
                       "virtual_cluster.over_quota", "virtual_cluster.over_quota"]
    change = db.scalar(select(AuditEvent).where(AuditEvent.action == "tenant_quota.change",
                                                AuditEvent.actor_label == "quota-expiry"))
    assert change is not None and change.before and change.after
    assert (change.before["gpus"], change.after["gpus"]) == (12, 4)
    assert expire_quotas(db, utcnow() + timedelta(days=9)) == []


def test_clusters_within_the_remaining_quota_are_not_flagged(db: Session) -> None:
    t = build_tenancy(db)
    _approved(db, t, 4, days=None)
    _approved(db, t, 2, days=1)
    cluster = factories.cluster(db, t.acme, factories.host_cluster(db), gpu_class_id=t.h100.id,
                                gpus=4)
    [expired] = expire_quotas(db, utcnow() + timedelta(days=2))
    assert expired.over_quota_cluster_ids == []
    assert cluster.over_quota is False


def test_the_worker_runs_expiry_and_a_second_pass_changes_nothing(
    sqlite_database: Database
) -> None:
    with sqlite_database.transaction() as db:
        t = build_tenancy(db)
        request = _approved(db, t, 3, days=1)
        request.ends_at = utcnow() - timedelta(seconds=1)
    settings = Settings(env="test")
    reconciler = QuotaExpiryReconciler(settings, sqlite_database)
    assert run_due(reconciler, "test-worker") == 1
    assert run_due(reconciler, "test-worker") == 0
    with sqlite_database.session() as db:
        quota = db.scalar(select(TenantQuota))
        assert quota is not None and quota.gpus == 0
        # One key, looked at again within a minute: an end date passes unnoticed no longer.
        [item] = queue.items(db, QUOTA_EXPIRY)
        assert item.key == "all" and item.attempts == 0
        assert utcnow() < item.due_at <= utcnow() + timedelta(seconds=60)
    assert reconciler.resync_seconds == settings.worker_poll_seconds * 15 <= 60


def test_an_approval_or_an_expiry_enqueues_the_tenants_queues_not_its_clusters(
        db: Session) -> None:
    """In the deciding transaction, due at once: the tenant's queue on each host it has
    clusters on follows the quota within seconds, not at the next resync; its clusters, whose
    own objects do not follow the quota while the tenant does not burst, are not woken."""
    t = build_tenancy(db)
    host = factories.host_cluster(db)
    factories.cluster(db, t.acme, host, "a", gpu_class_id=t.h100.id, gpus=1)
    factories.cluster(db, t.acme, host, "b")  # CPU only: the tenant queue is its too
    factories.cluster(db, t.globex, host, "other", gpu_class_id=t.h100.id, gpus=1)
    db.execute(delete(WorkItem))
    before = utcnow()
    request = _approved(db, t, 2, days=1)
    due = {item.key: item.due_at for item in queue.items(db, TENANT_QUEUES)}
    assert set(due) == {tenant_queue_key(t.acme.id, host.id)}
    assert all(before - timedelta(seconds=1) <= at <= utcnow() for at in due.values())
    assert queue.items(db, CLUSTERS) == []

    db.execute(delete(WorkItem))
    [expired] = expire_quotas(db, utcnow() + timedelta(days=2))
    assert expired.request_id == request.id
    assert {item.key for item in queue.items(db, TENANT_QUEUES)} == {
        tenant_queue_key(t.acme.id, host.id)}


def test_while_a_tenant_bursts_a_quota_change_enqueues_its_clusters_too(db: Session) -> None:
    """A bursting tenant's clusters may hold up to the tenant's ceiling (their queues' limit
    and their quota), which the quota moves."""
    t = build_tenancy(db)
    host = factories.host_cluster(db)
    a = factories.cluster(db, t.acme, host, "a", gpu_class_id=t.h100.id, gpus=1)
    db.add(BurstPolicy(tenant_id=t.acme.id, tier="burst"))
    db.flush()
    db.execute(delete(WorkItem))
    _approved(db, t, 2, days=1)
    assert {item.key for item in queue.items(db, CLUSTERS)} == {str(a.id)}


def test_the_expiry_reconciler_is_registered(sqlite_database: Database) -> None:
    from app.process.worker import build_kinds

    reconcilers = build_kinds(Settings(env="test"), sqlite_database, InMemoryConnector())
    names = [r.name for r in reconcilers]
    assert "quota-expiry" in names
