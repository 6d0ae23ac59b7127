"""Each person's notification preferences through the API: the kinds offered follow what they
can receive, a kind turned off is no email for them while others still get theirs (read back
from a real SMTP server), a mandatory kind cannot be turned off, and every change is audited."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.auth.models import User
from app.database.core import Database
from app.kit.config import Settings
from app.notifications import emit
from app.notifications.kinds import KINDS
from app.notifications.messages import KIND_HEADER
from app.notifications.models import NotificationPreference
from app.notifications.preference_service import ACTION, TOLD_TO_CREATORS
from app.reconcilers.notifications import NotificationSender
from app.reconcilers.runtime import Runtime
from app.workqueue import NOTIFICATIONS
from tests import factories
from tests.support import smtp
from tests.support.principals import bearer
from tests.support.smtp import smtp_server
from tests.support.tenancy import Tenancy, build_tenancy

PATH = "/api/v1/me/notification-preferences"
PERSON = {"kubeconfig.expiring", "endpoint.failing"}
TENANT = {k.name for k in KINDS.values() if k.audience == "tenant"}
PLATFORM = {k.name for k in KINDS.values() if k.audience == "platform"}


def _listed(client: TestClient, headers: dict[str, str]) -> dict[str, dict[str, Any]]:
    answer = client.get(PATH, headers=headers)
    assert answer.status_code == 200, answer.text
    return {row["kind"]: row for row in answer.json()}


def _put(client: TestClient, headers: dict[str, str], **email: bool) -> Any:
    return client.put(PATH, headers=headers, json={"preferences": [
        {"kind": kind.replace("__", "."), "email": on} for kind, on in email.items()]})


def _changes(db: Session) -> list[AuditEvent]:
    return list(db.scalars(select(AuditEvent).where(AuditEvent.action == ACTION)
                           .order_by(AuditEvent.id)))


def test_each_person_is_offered_the_kinds_they_can_receive(
        client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    both = factories.user(db, "admin-and-operator@example.com", admin=True)
    factories.membership(db, t.globex, both, "admin")
    db.commit()

    admin = _listed(client, bearer(db, t.acme_admin))
    assert set(admin) == PERSON | TENANT
    assert set(_listed(client, bearer(db, t.acme_member))) == PERSON | TOLD_TO_CREATORS
    assert set(_listed(client, bearer(db, t.acme_viewer))) == PERSON
    assert set(_listed(client, bearer(db, t.platform_admin))) == PERSON | PLATFORM
    assert set(_listed(client, bearer(db, both))) == PERSON | TENANT | PLATFORM
    # The standing, not the token: a platform admin's read-only token lists the same.
    assert set(_listed(client, bearer(db, t.platform_admin, "read"))) == PERSON | PLATFORM
    warning = admin["cluster.deletion_announced"]
    assert warning == {"kind": "cluster.deletion_announced", "title": "Cluster deletion announced",
                       "description": KINDS["cluster.deletion_announced"].description,
                       "email": True, "mandatory": True}
    assert [row["mandatory"] for row in admin.values()].count(True) == 1
    assert all(row["email"] and row["title"] for row in admin.values())


def test_the_kinds_told_to_a_creator_or_requester_are_offered_to_who_can_be_one() -> None:
    """A member may create clusters: every kind told to a creator is offered to members. Only
    an admin may request quota: kinds told to a requester are tenant kinds, offered to
    admins."""
    for spec in emit.EVENTS.values():
        if "creator" in spec.recipients:
            assert spec.kind in TOLD_TO_CREATORS, spec.kind
        if "requester" in spec.recipients:
            assert KINDS[spec.kind].audience == "tenant", spec.kind


def test_a_kind_turned_off_is_no_email_for_that_admin_while_another_admin_gets_it(
        client: TestClient, db: Session, database: Database, tmp_path: Path) -> None:
    t = build_tenancy(db)
    other = factories.user(db, "acme-admin-2@example.com")
    factories.membership(db, t.acme, other, "admin")
    db.commit()
    admin = bearer(db, t.acme_admin)

    turned = _put(client, admin, quota__decided=False)
    assert turned.status_code == 200, turned.text
    assert {r["kind"]: r["email"] for r in turned.json()}["quota.decided"] is False
    assert _listed(client, admin)["quota.decided"]["email"] is False
    _request_and_approve(client, db, t)

    with smtp_server(tmp_path) as mailbox:
        settings = Settings(env="test", smtp_host=smtp.HOST, smtp_port=mailbox.port,
                            smtp_username=smtp.USERNAME, smtp_password=smtp.PASSWORD,
                            smtp_from=smtp.SENDER, smtp_ca_file=str(mailbox.ca_file))
        runtime = Runtime(database, [NotificationSender(settings, database)],
                          identity="preferences-test")
        runtime.run_pass([NOTIFICATIONS])
        [told] = mailbox.to(other.email)
        assert told[KIND_HEADER] == "quota.decided"
        assert str(told["Subject"]).startswith("Quota request approved")
        assert mailbox.to(t.acme_admin.email) == []
        [asked] = mailbox.to(t.platform_admin.email)  # the request, as always
        assert asked[KIND_HEADER] == "quota.requested"

    [change] = _changes(db)
    assert (change.actor_id, change.target_type, change.target_id) == (
        t.acme_admin.id, "user", str(t.acme_admin.id))
    assert (change.before, change.after) == ({"quota.decided": True}, {"quota.decided": False})


def _request_and_approve(client: TestClient, db: Session, t: Tenancy) -> None:
    asked = client.post("/api/v1/tenants/acme/quota-requests", headers=bearer(db, t.acme_admin),
                        json={"gpu_class_id": t.h100.id, "gpus": 4, "reason": "training"})
    assert asked.status_code == 201, asked.text
    approved = client.post(f"/api/v1/quota-requests/{asked.json()['id']}/approve",
                           headers=bearer(db, t.platform_admin), json={"gpus": 4})
    assert approved.status_code == 200, approved.text


def test_a_mandatory_kind_cannot_be_turned_off_and_nothing_of_the_request_changes(
        client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    db.commit()
    admin = bearer(db, t.acme_admin)

    refused = _put(client, admin, cluster__asleep=False, cluster__deletion_announced=False)
    assert refused.status_code == 422
    body = refused.json()
    assert "cluster.deletion_announced" in body["detail"]
    assert "cannot be turned off" in body["detail"]
    assert body["errors"][0]["field"] == "preferences"
    assert _listed(client, admin)["cluster.asleep"]["email"] is True
    assert _changes(db) == []
    assert db.scalar(select(func.count()).select_from(NotificationPreference)) == 0
    # Asking it on is no change at all: allowed, nothing written.
    assert _put(client, admin, cluster__deletion_announced=True).status_code == 200
    assert _changes(db) == []


def test_unknown_and_unoffered_kinds_are_refused_naming_them(
        client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    db.commit()

    unknown = _put(client, bearer(db, t.acme_admin), cluster__exploded=False)
    assert unknown.status_code == 422
    [error] = unknown.json()["errors"]
    assert error["field"] == "preferences.0.kind"
    assert error["message"].startswith("no notification kind 'cluster.exploded'")
    # Never emailed, so never a choice.
    assert _put(client, bearer(db, t.acme_admin), test=False).status_code == 422
    viewer = _put(client, bearer(db, t.acme_viewer), cluster__ready=False)
    assert viewer.status_code == 422
    assert "'cluster.ready' is not a kind you receive" in viewer.json()["detail"]
    twice = client.put(PATH, headers=bearer(db, t.acme_admin), json={"preferences": [
        {"kind": "cluster.ready", "email": False}, {"kind": "cluster.ready", "email": True}]})
    assert twice.status_code == 422 and "cluster.ready" in twice.text
    assert _changes(db) == []


def test_turned_on_again_the_row_goes_and_each_change_is_audited(
        client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    db.commit()
    member = bearer(db, t.acme_member)

    assert _put(client, member, cluster__ready=False, cluster__failed=False).status_code == 200
    stored = db.execute(select(NotificationPreference.kind, NotificationPreference.email)
                        .where(NotificationPreference.user_id == t.acme_member.id)
                        .order_by(NotificationPreference.kind)).all()
    assert [tuple(row) for row in stored] == [("cluster.failed", False), ("cluster.ready", False)]
    # The same again changes nothing and records nothing.
    assert _put(client, member, cluster__ready=False).status_code == 200
    back = _put(client, member, cluster__ready=True)
    assert back.status_code == 200
    assert db.scalars(select(NotificationPreference.kind).where(
        NotificationPreference.user_id == t.acme_member.id)).all() == ["cluster.failed"]
    assert [(c.before, c.after) for c in _changes(db)] == [
        ({"cluster.failed": True, "cluster.ready": True},
         {"cluster.failed": False, "cluster.ready": False}),
        ({"cluster.ready": False}, {"cluster.ready": True})]
    # Another person's choices are their own.
    assert _listed(client, bearer(db, t.acme_admin))["cluster.ready"]["email"] is True


def test_a_read_only_token_cannot_change_them(client: TestClient, db: Session) -> None:
    user: User = factories.user(db, "reader@example.com")
    db.commit()
    refused = _put(client, bearer(db, user, "read"), kubeconfig__expiring=False)
    assert refused.status_code == 403
    assert _changes(db) == []
