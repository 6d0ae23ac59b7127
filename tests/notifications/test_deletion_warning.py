"""The deletion warning arrives before the deletion: a sleeping cluster's policy announces its
deletion, and the deletion waits while that warning is still on its way (its email pending),
at most one more warning period, then goes anyway and says why. Against the real SMTP server,
on the sleep policy's fixed clock run 720 times faster (a day of warning is two minutes)."""

from __future__ import annotations

import logging
from datetime import timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from app.audit.models import AuditEvent
from app.clusters import power
from app.clusters.models import VirtualCluster
from app.clusters.sleep_policy import UNANNOUNCED
from app.kit.config import Settings
from app.notifications.messages import KIND_HEADER
from app.reconcilers.sleep_policy import SleepPolicyReconciler
from app.workqueue import SLEEP_POLICY
from app.workqueue import repository as queue
from tests.clusters.support import Clock, Harness, create
from tests.reconcilers.test_notification_delivery import Outbox, outbox, smtp_settings
from tests.support import smtp
from tests.support.drive import run_due
from tests.support.smtp import Mailbox
from tests.support.tenancy import Tenancy
from tests.support.web import free_port

SPEEDUP = 720
# PORTAL_SLEEP_DELETE_WARNING_HOURS=24 at 720 times: two minutes.
WARNING = timedelta(hours=24) / SPEEDUP
ANNOUNCED = "cluster.deletion_announced"


class Walk:
    """A Ready cluster of acme put to sleep a day (at 720 times) before its deletion, its
    policy, and the outbox delivering to the SMTP server on ``port``."""

    def __init__(self, harness: Harness, tenancy: Tenancy, tmp_path: Path, port: int,
                 ca_file: Path, **settings: Any) -> None:
        self.database = harness.database
        self.harness = harness
        created = create(self.database, tenancy)
        harness.converge()
        self.cluster_id = created.id
        self.clock = Clock()
        mail = smtp_settings(port, ca_file) | settings
        self.policy = SleepPolicyReconciler(
            Settings(env="test", sleep_policy_speedup=SPEEDUP, sleep_delete_warning_hours=24,
                     **mail), self.database, clock=self.clock)
        self.outbox: Outbox = outbox(self.database, tmp_path, **mail)
        self.start = self.clock.now
        with self.database.transaction() as db:
            db.execute(update(VirtualCluster).where(VirtualCluster.id == created.id).values(
                power=power.ASLEEP, power_reason="manual", delete_after_sleep_days=1,
                asleep_since=self.start - timedelta(days=1) / SPEEDUP + timedelta(seconds=60)))

    def policy_at(self, seconds: float) -> None:
        """The sleep policy's pass ``seconds`` after the walk began."""
        self.clock.now = self.start + timedelta(seconds=seconds)
        with self.database.transaction() as db:
            queue.enqueue(db, SLEEP_POLICY, "all", at=self.start - timedelta(days=30))
        run_due(self.policy, "policy")

    def cluster(self) -> VirtualCluster | None:
        return self.harness.cluster(self.cluster_id)

    def audit(self, action: str) -> list[AuditEvent]:
        with self.database.session() as db:
            return list(db.scalars(select(AuditEvent).where(
                AuditEvent.action == action,
                AuditEvent.target_id == str(self.cluster_id)).order_by(AuditEvent.id)))

    def deletion_requested(self) -> bool:
        found = self.cluster()
        return found is None or found.deletion_requested_at is not None


def _announced(mailbox: Mailbox, address: str) -> list[EmailMessage]:
    return [m for m in mailbox.to(address) if m[KIND_HEADER] == ANNOUNCED]


def test_the_warning_email_arrives_before_the_deletion_which_waits_for_it(
        harness: Harness, tenancy: Tenancy, tmp_path: Path, mailbox: Mailbox) -> None:
    walk = Walk(harness, tenancy, tmp_path, mailbox.port, mailbox.ca_file)
    walk.policy_at(0)
    assert len(walk.audit("virtual_cluster.deletion_warning")) == 1
    # Past its time and warned long enough, but the warning is not delivered yet: it waits.
    walk.policy_at(WARNING.total_seconds() + 10)
    assert not walk.deletion_requested()
    assert _announced(mailbox, "acme-admin@example.com") == []

    walk.outbox.run()
    (warning,) = _announced(mailbox, "acme-admin@example.com")
    assert "will be deleted" in str(warning["Subject"])
    assert walk.audit("virtual_cluster.deleted") == []

    walk.policy_at(WARNING.total_seconds() + 20)
    (asked,) = walk.audit("virtual_cluster.delete")
    assert asked.after is not None and "reason" not in asked.after
    harness.converge()
    assert walk.cluster() is None
    assert len(walk.audit("virtual_cluster.deleted")) == 1


def test_with_the_smtp_server_down_the_deletion_waits_one_warning_period_then_goes(
        harness: Harness, tenancy: Tenancy, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    port = free_port(smtp.HOST)
    walk = Walk(harness, tenancy, tmp_path, port, tmp_path / "no-server.pem")
    walk.policy_at(0)
    walk.outbox.run()
    assert walk.outbox.deliveries()[-1].state == "pending"
    due = walk.cluster()
    assert due is not None and due.deletion_due_at is not None
    late = (due.deletion_due_at - walk.start).total_seconds()

    walk.policy_at(late + 5)
    walk.policy_at(late + WARNING.total_seconds() - 5)
    assert not walk.deletion_requested()

    with caplog.at_level(logging.WARNING, logger="app.clusters.sleep_policy"):
        walk.policy_at(late + WARNING.total_seconds() + 1)
    (asked,) = walk.audit("virtual_cluster.delete")
    assert asked.after is not None and asked.after["reason"] == UNANNOUNCED
    assert "still undelivered" in caplog.text
    harness.converge()
    assert len(walk.audit("virtual_cluster.deleted")) == 1


def test_without_smtp_configured_an_email_never_to_go_holds_no_deletion(
        harness: Harness, tenancy: Tenancy, tmp_path: Path) -> None:
    walk = Walk(harness, tenancy, tmp_path, 25, tmp_path / "none.pem", smtp_host="")
    walk.policy_at(0)
    walk.outbox.run()
    assert {d.state for d in walk.outbox.deliveries()} == {"pending"}
    walk.policy_at(WARNING.total_seconds() + 10)
    (asked,) = walk.audit("virtual_cluster.delete")
    assert asked.after is not None and "reason" not in asked.after
