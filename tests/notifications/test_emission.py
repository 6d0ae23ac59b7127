"""Notifications are written with the change that causes them, to exactly the people and
endpoints that should hear of it (no delivery yet: the outbox and its queue)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import delete, inspect, select, update
from sqlalchemy.orm import Session

from app.auth.models import User
from app.clusters import power
from app.clusters.models import VirtualCluster
from app.clusters.schemas import ClusterResize
from app.clusters.service import resize_cluster
from app.clusters.sleep_policy import Moment, carry_out
from app.database import migrate
from app.database.core import Database, make_engine, utcnow
from app.kit.config import Settings
from app.kube.evictions import Eviction
from app.kube.manifests.names import host_namespace_name
from app.notifications import emit, repository
from app.notifications.models import (
    Notification,
    NotificationDelivery,
    NotificationPreference,
    WebhookEndpoint,
)
from app.quotas.schemas import ApproveIn, QuotaRequestCreate, RejectIn
from app.quotas.service import approve, create_request, reject
from app.templates.service import store_validation
from app.tenants.models import Membership, Tenant
from app.usage.reclaims import record_evictions
from app.workqueue import NOTIFICATIONS
from app.workqueue.models import WorkItem
from tests import factories
from tests.clusters.support import Harness, create
from tests.support import postgres
from tests.support.tenancy import Tenancy, build_tenancy

TABLES = {"notifications", "notification_deliveries", "webhook_endpoints",
          "notification_preferences"}


@pytest.fixture(params=["postgresql", "sqlite"])
def session(request: pytest.FixtureRequest) -> Iterator[Session]:
    """PostgreSQL (the test's rolled-back transaction) or the embedded SQLite file."""
    if request.param == "postgresql":
        yield request.getfixturevalue("db")
        return
    database: Database = request.getfixturevalue("sqlite_database")
    with database.session() as db:
        yield db


def _submitted(db: Session, t: Tenancy, gpus: int = 4) -> int:
    created = create_request(db, t.principal(t.acme_admin), Settings(env="test"), "acme",
                             QuotaRequestCreate(gpu_class_id=t.h100.id, gpus=gpus,
                                                reason="training"))
    return created.id


def _told(db: Session, kind: str) -> list[tuple[str, str]]:
    """(destination, state) of every delivery of the kind's notifications, in order."""
    return [(row.destination, row.state) for row in db.execute(
        select(NotificationDelivery.destination, NotificationDelivery.state)
        .join(Notification, Notification.id == NotificationDelivery.notification_id)
        .where(Notification.kind == kind).order_by(NotificationDelivery.id))]


def _email(*users: User) -> list[tuple[str, str]]:
    return [(f"email:{user.id}", "pending") for user in users]


def _queued(db: Session) -> set[str]:
    return set(db.scalars(select(WorkItem.key).where(WorkItem.kind == NOTIFICATIONS)))


def _endpoint(db: Session, tenant: Tenant | None, name: str, **fields: object) -> WebhookEndpoint:
    row = WebhookEndpoint(tenant_id=tenant.id if tenant else None, name=name,
                          url=f"https://hooks.example.com/{name}", format="cloudevents",
                          secret_sealed="sealed", **fields)
    db.add(row)
    db.flush()
    return row


def _second_admin(db: Session, t: Tenancy) -> User:
    admin = factories.user(db, "acme-admin-2@example.com")
    t.memberships.append(factories.membership(db, t.acme, admin, "admin"))
    return admin


def test_a_submitted_request_is_one_pending_email_per_platform_admin(session: Session) -> None:
    t = build_tenancy(session)
    granted = factories.user(session, "operator-made@example.com", admin_granted=True)
    request_id = _submitted(session, t)
    assert sorted(_told(session, "quota.requested")) == sorted(_email(t.platform_admin, granted))
    assert _queued(session) == {f"email:{t.platform_admin.id}", f"email:{granted.id}"}
    notification = session.scalars(select(Notification)).one()
    assert notification.tenant_id == t.acme.id and not notification.mandatory
    assert notification.payload == {
        "tenant": "acme", "request": f"H100 80GB quota request #{request_id} (acme)",
        "request_id": request_id, "gpus": 4, "gpu_class": "H100 80GB", "region": "",
        "ends_at": None, "path": "/admin/quota-requests"}
    assert len(notification.uid) == 36


def test_an_approval_tells_the_requester_and_the_tenants_admins_and_nobody_else(
        session: Session) -> None:
    t = build_tenancy(session)
    other_admin = _second_admin(session, t)
    request_id = _submitted(session, t)
    # The requester is no admin any more: told as the requester, while still a member.
    session.execute(update(Membership).where(
        Membership.user_id == t.acme_admin.id).values(role="member"))
    approve(session, t.principal(t.platform_admin), request_id, ApproveIn())
    assert _told(session, "quota.decided") == _email(t.acme_admin, other_admin)
    told = {row[0] for row in _told(session, "quota.decided")}
    for outsider in (t.globex_admin, t.acme_member, t.acme_viewer, t.platform_admin):
        assert f"email:{outsider.id}" not in told
    # The quota the approval added is the decision, not a second message.
    assert _told(session, "quota.changed") == []
    payload = session.scalar(select(Notification.payload).where(
        Notification.kind == "quota.decided"))
    assert payload is not None
    assert (payload["decision"], payload["approved_gpus"], payload["path"]) == (
        "approved", 4, "/t/acme")


def test_fanning_out_again_adds_no_second_delivery(session: Session) -> None:
    """A replayed fan-out (a retried transaction, a replayed write) tells nobody twice."""
    t = build_tenancy(session)
    _submitted(session, t)
    first = _told(session, "quota.requested")
    rows = [{k: v for k, v in row._mapping.items() if k != "id"} for row in session.execute(
        select(NotificationDelivery.__table__))]
    repository.add_deliveries(session, rows)
    assert _told(session, "quota.requested") == first


def test_a_requester_who_left_the_tenant_is_not_told(session: Session) -> None:
    t = build_tenancy(session)
    other_admin = _second_admin(session, t)
    request_id = _submitted(session, t)
    session.execute(delete(Membership).where(Membership.user_id == t.acme_admin.id))
    reject(session, t.principal(t.platform_admin), request_id, RejectIn(note="not now"))
    assert _told(session, "quota.decided") == _email(other_admin)


def test_email_turned_off_is_not_sent_but_a_mandatory_kind_is(session: Session) -> None:
    t = build_tenancy(session)
    other_admin = _second_admin(session, t)
    for kind in ("quota.decided", "cluster.deletion_announced"):
        session.add(NotificationPreference(user_id=other_admin.id, kind=kind, email=False))
    session.flush()
    approve(session, t.principal(t.platform_admin), _submitted(session, t), ApproveIn())
    assert _told(session, "quota.decided") == _email(t.acme_admin)

    cluster = _asleep_for_days(session, t, 10)
    carry_out(session, cluster, "warn", Moment(utcnow(), None, timedelta(days=1)))
    assert _told(session, "cluster.deletion_announced") == _email(t.acme_admin, other_admin)
    notification = session.scalars(select(Notification).where(
        Notification.kind == "cluster.deletion_announced")).one()
    assert notification.mandatory
    assert notification.payload["path"] == "/t/acme/clusters/idle"


def _asleep_for_days(db: Session, t: Tenancy, days: int) -> VirtualCluster:
    return factories.cluster(db, t.acme, factories.host_cluster(db), "idle",
                             gpu_class_id=t.h100.id, gpus=1, power=power.ASLEEP,
                             asleep_since=utcnow() - timedelta(days=days),
                             delete_after_sleep_days=1)


def test_a_failed_template_validation_tells_the_platform_admins_and_a_pass_nobody(
        session: Session) -> None:
    t = build_tenancy(session)
    template = factories.cluster_template(session, "training")
    version = factories.template_version(session, template, state="draft")
    failed = {"passed": False, "checks": [{"name": "dry-run", "passed": False,
                                            "reasons": ["refused"]}]}
    store_validation(session, version, utcnow(), {"passed": True, "checks": []}, "worker")
    assert session.scalars(select(Notification)).all() == []
    store_validation(session, version, utcnow(), failed, "worker")
    assert _told(session, "template.validation_failed") == _email(t.platform_admin)
    assert session.scalar(select(Notification.payload)) == {
        "template": "training", "version": 1, "path": "/admin/cluster-templates/training"}


def test_webhooks_of_the_tenant_that_take_the_kind_get_a_delivery(session: Session) -> None:
    t = build_tenancy(session)
    acme_hook = _endpoint(session, t.acme, "acme-chat")
    acme_quota_only = _endpoint(session, t.acme, "acme-quota", kinds=["quota.decided"])
    _endpoint(session, t.acme, "acme-ready-only", kinds=["cluster.ready"])
    _endpoint(session, t.acme, "acme-disabled", disabled=True)
    _endpoint(session, t.globex, "globex-chat")
    platform_hook = _endpoint(session, None, "platform-chat")

    request_id = _submitted(session, t)
    webhooks = [row for row in _told(session, "quota.requested") if row[0].startswith("webhook")]
    assert webhooks == [(f"webhook:{platform_hook.id}", "pending")]

    approve(session, t.principal(t.platform_admin), request_id, ApproveIn())
    webhooks = [row for row in _told(session, "quota.decided") if row[0].startswith("webhook")]
    assert webhooks == [(f"webhook:{acme_hook.id}", "pending"),
                        (f"webhook:{acme_quota_only.id}", "pending")]
    assert {f"webhook:{acme_hook.id}", f"webhook:{platform_hook.id}"} <= _queued(session)


@pytest.fixture(params=["postgresql", "sqlite"])
def committed(request: pytest.FixtureRequest) -> Database:
    """A database whose transactions commit: a clone of PostgreSQL's, or the SQLite file."""
    name = "own_pg_database" if request.param == "postgresql" else "sqlite_database"
    database: Database = request.getfixturevalue(name)
    return database


def test_a_change_rolled_back_leaves_no_notification(committed: Database) -> None:
    with committed.transaction() as db:
        t = build_tenancy(db)
    with pytest.raises(RuntimeError, match="after the audit"):
        _submitted_then_failed(committed, t)
    with committed.session() as db:
        assert db.scalars(select(Notification)).all() == []
        assert db.scalars(select(NotificationDelivery)).all() == []
        assert _queued(db) == set()


def _submitted_then_failed(database: Database, t: Tenancy) -> None:
    with database.transaction() as db:
        _submitted(db, t)
        assert _told(db, "quota.requested") == _email(t.platform_admin)
        raise RuntimeError("the request's transaction fails after the audit")


def test_a_full_destination_gets_new_deliveries_dropped_but_not_mandatory_ones(
        session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emit, "QUEUE_LIMIT", 2)
    t = build_tenancy(session)
    admin = f"email:{t.platform_admin.id}"
    first, second, third = (_submitted(session, t, gpus=1) for _ in range(3))
    assert _told(session, "quota.requested") == [(admin, "pending"), (admin, "pending"),
                                                 (admin, "dropped")]
    approve(session, t.principal(t.platform_admin), first, ApproveIn())
    reject(session, t.principal(t.platform_admin), second, RejectIn())
    acme_admin = f"email:{t.acme_admin.id}"
    assert _told(session, "quota.decided") == [(acme_admin, "pending"), (acme_admin, "pending")]

    cluster = _asleep_for_days(session, t, 10)
    carry_out(session, cluster, "warn", Moment(utcnow(), None, timedelta(days=1)))
    assert _told(session, "cluster.deletion_announced") == [(acme_admin, "pending")]
    approve(session, t.principal(t.platform_admin), third, ApproveIn())
    assert _told(session, "quota.decided")[-1] == (acme_admin, "dropped")


def test_burst_gpus_reclaimed_in_one_window_are_one_message_at_its_end(
        session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    now = datetime(2026, 12, 7, 10, 5, tzinfo=UTC)
    monkeypatch.setattr(emit, "utcnow", lambda: now)
    t = build_tenancy(session)
    host = factories.host_cluster(session)
    factories.cluster(session, t.acme, host, "train", gpu_class_id=t.h100.id, gpus=2)
    namespace = host_namespace_name("acme", "train")
    evictions = [Eviction(uid=f"uid-{n}", namespace=namespace, host_pod=f"worker-{n}",
                          action="reclaim", queue_line="", at="2026-12-07T10:04:00Z")
                 for n in range(3)]
    record_evictions(session, host.id, evictions[:2])
    record_evictions(session, host.id, evictions[2:])
    notification = session.scalars(select(Notification)).one()
    assert notification.kind == "gpus.reclaimed"
    assert notification.deliver_after == datetime(2026, 12, 7, 10, 15, tzinfo=UTC)
    assert notification.payload["count"] == 3
    assert [item["pod"] for item in notification.payload["items"]] == [
        "worker-0", "worker-1", "worker-2"]
    assert _told(session, "gpus.reclaimed") == _email(t.acme_admin)
    assert session.scalar(select(WorkItem.due_at).where(
        WorkItem.kind == NOTIFICATIONS)) == notification.deliver_after


def test_ready_is_told_once_to_the_creator_and_the_admins_not_on_a_resize(
        harness: Harness, tenancy: Tenancy) -> None:
    created = create(harness.database, tenancy)
    with harness.database.transaction() as db:
        other_admin = _second_admin(db, tenancy)
        db.execute(update(Membership).where(
            Membership.user_id == tenancy.acme_admin.id).values(role="member"))
    harness.converge()
    with harness.database.session() as db:
        assert _told(db, "cluster.ready") == _email(tenancy.acme_admin, other_admin)
        payload = db.scalar(select(Notification.payload))
        assert payload == {"tenant": "acme", "cluster": "train", "cluster_id": created.id,
                           "path": "/t/acme/clusters/train"}
    with harness.database.transaction() as db:
        db.execute(update(Membership).where(
            Membership.user_id == tenancy.acme_admin.id).values(role="admin"))
        resize_cluster(db, tenancy.principal(tenancy.acme_admin), "acme", "train",
                       ClusterResize(gpus=8, memory_mib=131072))
    harness.converge(2)
    cluster = harness.cluster(created.id)
    assert cluster is not None and cluster.observed_generation == 2
    with harness.database.session() as db:
        assert len(_told(db, "cluster.ready")) == 2


# ----- the migration


@pytest.fixture(params=["postgresql", "sqlite"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'migrate.db'}"
        return
    name = postgres.unique_name("gtp_ntf")
    postgres.create_database(name)
    yield postgres.sqlalchemy_url(name)
    postgres.drop_database(name)


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_the_migration_adds_the_tables_and_takes_them_away(empty_url: str) -> None:
    script = ScriptDirectory.from_config(migrate.alembic_config(empty_url))
    revision = script.get_revision("0033")
    assert revision is not None
    migrate.upgrade(empty_url, revision.revision)
    assert _tables(empty_url) >= TABLES
    below = revision.down_revision
    assert isinstance(below, str)
    migrate.downgrade(empty_url, below)
    assert not TABLES & _tables(empty_url)
    assert "audit_events" in _tables(empty_url)
    migrate.upgrade(empty_url)
    assert _tables(empty_url) >= TABLES
