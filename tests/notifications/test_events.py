"""Each event of the issue's table, end to end: driven through the services (or the worker's
steps on the in-memory host), delivered by the worker's ``notifications`` kind to a real SMTP
server, and read back from its mailboxes: exactly the people ``app/notifications/emit.py``'s
EVENTS names get it (a member of another tenant, a plain member and a viewer never do).

One row per event in ``TABLE``: a new event is one line and its driver.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from app.audit import service as audit
from app.auth.models import User
from app.clusters import power
from app.clusters.service import change_power, delete_cluster
from app.clusters.sleep_policy import Moment, carry_out
from app.database.core import Database, utcnow
from app.hosts.models import HostCluster
from app.kit.config import Settings
from app.kube.errors import PermanentKubeError
from app.kube.evictions import Eviction
from app.kube.manifests import cluster_queue_name
from app.kube.manifests.names import host_namespace_name
from app.machines.lifecycle import Observed
from app.machines.service import record_observation
from app.notifications.messages import ID_HEADER, KIND_HEADER
from app.notifications.models import Notification, NotificationDelivery
from app.quotas.schemas import ApproveIn, QuotaRequestCreate, RejectIn
from app.quotas.service import approve, create_request, expire_quotas, reject
from app.reconcilers.hosts import HostHealthReconciler
from app.templates.service import store_validation
from app.tenants.models import Membership
from app.usage.reclaims import record_evictions
from tests import factories
from tests.clusters.support import Harness, create
from tests.reconcilers.test_notification_delivery import outbox, smtp_settings
from tests.support.drive import run_due
from tests.support.kube import InMemoryConnector
from tests.support.smtp import Mailbox, smtp_server
from tests.support.tenancy import Tenancy

# Everyone of the world, by the name of their address (<name>@example.com).
PEOPLE = ("platform-admin", "acme-admin", "acme-lead", "acme-member", "acme-viewer",
          "globex-admin")
TENANT_ADMINS = {"acme-admin", "acme-lead"}
PLATFORM_ADMINS = {"platform-admin"}


@pytest.fixture(scope="module")
def mailbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mailbox]:
    """One server for the module: each test reads only its own notifications' messages."""
    with smtp_server(tmp_path_factory.mktemp("events-smtp")) as serving:
        yield serving


@dataclass
class World:
    """acme (16 H100 approved; admins acme-admin and acme-lead, a member, a viewer), globex
    with its admin, a platform admin; the cluster worker on the in-memory host."""

    harness: Harness
    tenancy: Tenancy

    @property
    def database(self) -> Database:
        return self.harness.database

    def demote_acme_admin(self) -> None:
        """acme-admin, the requester or creator, is a plain member now: told as that."""
        with self.database.transaction() as db:
            db.execute(update(Membership).where(
                Membership.user_id == self.tenancy.acme_admin.id).values(role="member"))


@pytest.fixture
def world(harness: Harness, tenancy: Tenancy) -> World:
    with harness.database.transaction() as db:
        lead = factories.user(db, "acme-lead@example.com")
        tenancy.memberships.append(factories.membership(db, tenancy.acme, lead, "admin"))
    return World(harness, tenancy)


# ----- the drivers: each makes its event happen the way the portal does


def _submitted(w: World, **fields: object) -> int:
    t = w.tenancy
    with w.database.transaction() as db:
        return create_request(db, t.principal(t.acme_admin), Settings(env="test"), "acme",
                              QuotaRequestCreate(gpu_class_id=t.h100.id, gpus=4,
                                                 reason="training", **fields)).id


def quota_submitted(w: World) -> None:
    _submitted(w)


def quota_approved(w: World) -> None:
    request_id = _submitted(w)
    w.demote_acme_admin()
    with w.database.transaction() as db:
        approve(db, w.tenancy.principal(w.tenancy.platform_admin), request_id, ApproveIn())


def quota_rejected(w: World) -> None:
    request_id = _submitted(w)
    w.demote_acme_admin()
    with w.database.transaction() as db:
        reject(db, w.tenancy.principal(w.tenancy.platform_admin), request_id,
               RejectIn(note="not this quarter"))


def quota_changed_by_an_admin(w: World) -> None:
    """No service changes a quota outside a request yet: the audited change, as a platform
    admin's direct change would record it (no ``quota_request_id``)."""
    t = w.tenancy
    with w.database.transaction() as db:
        audit.record(db, action="tenant_quota.change", actor_id=t.platform_admin.id,
                     actor_label=t.platform_admin.email, tenant_id=t.acme.id,
                     target_type="tenant_quota", target_id=1, target_label="acme H100 quota",
                     before={"gpus": 16, "gpu_class": "H100 80GB", "region": ""},
                     after={"gpus": 24, "gpu_class": "H100 80GB", "region": "",
                            "gpu_class_id": t.h100.id, "cpu_millicores": 0, "memory_mib": 0})


def quota_expired(w: World) -> None:
    ends_at = utcnow() + timedelta(days=2)
    request_id = _submitted(w, ends_at=ends_at)
    with w.database.transaction() as db:
        approve(db, w.tenancy.principal(w.tenancy.platform_admin), request_id, ApproveIn())
    with w.database.transaction() as db:
        assert [e.request_id for e in expire_quotas(db, ends_at + timedelta(minutes=1))] == [
            request_id]


def _ready(w: World) -> int:
    created = create(w.database, w.tenancy)
    w.harness.converge()
    return created.id


def cluster_ready(w: World) -> None:
    create(w.database, w.tenancy)
    w.demote_acme_admin()
    w.harness.converge()


def cluster_failed(w: World) -> None:
    w.harness.kube.inject(
        "apply", PermanentKubeError("queues.scheduling.run.ai is forbidden",
                                    reason="Forbidden", status=403),
        match=lambda call: call.kind == "Queue"
        and call.name == cluster_queue_name("acme", "train"))
    create(w.database, w.tenancy)
    w.demote_acme_admin()
    w.harness.run()


def _power(w: World, wanted: str) -> None:
    with w.database.transaction() as db:
        change_power(db, w.tenancy.principal(w.tenancy.acme_admin), "acme", "train", wanted)
    w.harness.converge()


def cluster_asleep(w: World) -> None:
    _ready(w)
    _power(w, power.ASLEEP)


def cluster_awake(w: World) -> None:
    cluster_asleep(w)
    _power(w, power.AWAKE)


def deletion_announced(w: World) -> None:
    with w.database.transaction() as db:
        cluster = factories.cluster(db, w.tenancy.acme, factories.host_cluster(db), "idle",
                                    gpu_class_id=w.tenancy.h100.id, gpus=1, power=power.ASLEEP,
                                    asleep_since=utcnow() - timedelta(days=10),
                                    delete_after_sleep_days=1)
        carry_out(db, cluster, "warn", Moment(utcnow(), None, timedelta(days=1)))


def cluster_deleted(w: World) -> None:
    _ready(w)
    with w.database.transaction() as db:
        delete_cluster(db, w.tenancy.principal(w.tenancy.acme_admin), "acme", "train")
    w.harness.converge()


def burst_reclaimed(w: World) -> None:
    with w.database.transaction() as db:
        host = factories.host_cluster(db)
        factories.cluster(db, w.tenancy.acme, host, "burst", gpu_class_id=w.tenancy.h100.id,
                          gpus=2)
        namespace = host_namespace_name("acme", "burst")
        record_evictions(db, host.id, [
            Eviction(uid=f"uid-{n}", namespace=namespace, host_pod=f"worker-{n}",
                     action="reclaim", queue_line="", at=utcnow().isoformat())
            for n in range(3)])


def host_unreachable(w: World) -> None:
    with w.database.transaction() as db:
        db.execute(update(HostCluster).where(HostCluster.is_default.is_(True)).values(
            health_reachable=True))  # as last seen
    settings = Settings(env="test", database_url="sqlite://")
    run_due(HostHealthReconciler(settings, w.database, InMemoryConnector(None), None), "w")


def machine_failed(w: World) -> None:
    with w.database.transaction() as db:
        row = factories.machine(db, factories.host_cluster(db), w.tenancy.h100, "gpu-07",
                                phase="provisioning", desired="provisioned")
        record_observation(db, row, Observed(state="provisioning",
                                             error_type="provisioning error",
                                             error_message="the BMC refused the image"),
                           1, utcnow())


def template_validation_failed(w: World) -> None:
    with w.database.transaction() as db:
        template = factories.cluster_template(db, "training")
        version = factories.template_version(db, template, state="draft")
        store_validation(db, version, utcnow(), {"passed": False, "checks": [
            {"name": "dry-run", "passed": False, "reasons": ["refused"]}]}, "worker")


# (event, its driver, the kind told, who gets it)
TABLE: list[tuple[str, Callable[[World], None], str, set[str]]] = [
    ("quota request submitted", quota_submitted, "quota.requested", PLATFORM_ADMINS),
    ("quota request approved", quota_approved, "quota.decided", TENANT_ADMINS),
    ("quota request rejected", quota_rejected, "quota.decided", TENANT_ADMINS),
    ("quota changed by an admin", quota_changed_by_an_admin, "quota.changed", TENANT_ADMINS),
    ("quota expired", quota_expired, "quota.changed", TENANT_ADMINS),
    ("cluster Ready", cluster_ready, "cluster.ready", TENANT_ADMINS),
    ("cluster Failed", cluster_failed, "cluster.failed", TENANT_ADMINS),
    ("cluster asleep", cluster_asleep, "cluster.asleep", TENANT_ADMINS),
    ("cluster awake", cluster_awake, "cluster.awake", TENANT_ADMINS),
    ("deletion announced", deletion_announced, "cluster.deletion_announced", TENANT_ADMINS),
    ("cluster deleted", cluster_deleted, "cluster.deleted", TENANT_ADMINS),
    ("burst GPUs reclaimed (digest)", burst_reclaimed, "gpus.reclaimed", TENANT_ADMINS),
    ("host unreachable", host_unreachable, "host.unreachable", PLATFORM_ADMINS),
    ("machine failed", machine_failed, "machine.failed", PLATFORM_ADMINS),
    ("template validation failed", template_validation_failed, "template.validation_failed",
     PLATFORM_ADMINS),
]


def _uids(database: Database, kind: str) -> set[str]:
    with database.session() as db:
        return set(db.scalars(select(Notification.uid).where(Notification.kind == kind)))


def _names(database: Database) -> dict[str, str]:
    """Address -> name of everyone in the world."""
    with database.session() as db:
        addresses = db.scalars(select(User.email).where(
            User.email.in_([f"{name}@example.com" for name in PEOPLE])))
        return {address: address.split("@")[0] for address in addresses}


@pytest.mark.parametrize(("event", "drive", "kind", "told"), TABLE,
                         ids=[row[0] for row in TABLE])
def test_each_event_reaches_exactly_the_people_it_concerns(
        world: World, mailbox: Mailbox, tmp_path: Path, event: str,
        drive: Callable[[World], None], kind: str, told: set[str]) -> None:
    database = world.database
    drive(world)
    uids = _uids(database, kind)
    assert len(uids) == 1, f"{event}: one {kind} notification"
    box = outbox(database, tmp_path, **smtp_settings(mailbox.port, mailbox.ca_file),
                 base_url="https://portal.test")
    box.run()
    box.run(after_seconds=16 * 60)  # past a digest's window

    names = _names(database)
    assert len(names) == len(PEOPLE)
    received: dict[str, str] = {}
    for message, (_, recipients) in zip(list(mailbox.messages), list(mailbox.envelopes),
                                        strict=True):
        if message[ID_HEADER] in uids:
            assert message[KIND_HEADER] == kind
            plain = message.get_body(("plain",))
            assert plain is not None and "https://portal.test/" in plain.get_content()
            received.update({names.get(r, r): str(message["Subject"]) for r in recipients})
    assert set(received) == told, event
    for outsider in ("globex-admin", "acme-member", "acme-viewer"):
        assert outsider not in received
    with database.session() as db:
        states = set(db.scalars(select(NotificationDelivery.state).join(
            Notification, Notification.id == NotificationDelivery.notification_id).where(
            Notification.kind == kind)))
    assert states == {"delivered"}
