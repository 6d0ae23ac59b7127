"""PUT .../clusters/{c}/sleep-policy: tenant admins set it, it is checked field by field,
audited, and the cluster's JSON shows it."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.clusters.models import VirtualCluster
from app.database.core import utcnow
from app.workqueue import SLEEP_POLICY
from app.workqueue import repository as queue
from tests import factories
from tests.support.tenancy import Tenancy, headers

URL = "/api/v1/tenants/acme/clusters/train/sleep-policy"
POLICY = {"never_sleep": False, "sleep_after_idle_minutes": 30, "idle_measure": "bound",
          "sleep_schedule": "weekdays 20:00-08:00, weekends", "sleep_timezone": "Europe/Berlin",
          "delete_after_sleep_days": 14}


@pytest.fixture
def train(db: Session, tenancy: Tenancy) -> VirtualCluster:
    cluster = factories.cluster(db, tenancy.acme, factories.host_cluster(db), "train")
    db.commit()
    return cluster


def _events(db: Session) -> list[AuditEvent]:
    return list(db.scalars(select(AuditEvent).where(
        AuditEvent.action == "virtual_cluster.sleep_policy").order_by(AuditEvent.id)))


def test_a_tenant_admin_sets_the_policy_and_it_is_audited_once(
    client: TestClient, db: Session, tenancy: Tenancy, train: VirtualCluster
) -> None:
    answer = client.put(URL, json=POLICY, headers=headers(db, tenancy.acme_admin))
    assert answer.status_code == 200, answer.text
    assert answer.json()["sleep_policy"] == {**POLICY, "deletion_warned_at": None,
                                             "deletes_at": None}
    again = client.put(URL, json=POLICY, headers=headers(db, tenancy.acme_admin))
    assert again.status_code == 200
    db.expire_all()
    [event] = _events(db)
    assert event.before is not None and event.after == POLICY
    assert event.before["sleep_after_idle_minutes"] is None
    assert event.actor_id == tenancy.acme_admin.id
    # The worker's policy kind looks at once: a window may have begun already.
    assert [item.key for item in queue.items(db, SLEEP_POLICY)] == ["all"]
    shown = client.get("/api/v1/tenants/acme/clusters/train",
                       headers=headers(db, tenancy.acme_viewer)).json()
    assert shown["sleep_policy"]["sleep_schedule"] == POLICY["sleep_schedule"]


def test_what_is_left_out_is_off(client: TestClient, db: Session, tenancy: Tenancy,
                                 train: VirtualCluster) -> None:
    client.put(URL, json=POLICY, headers=headers(db, tenancy.acme_admin))
    answer = client.put(URL, json={"sleep_schedule": ""}, headers=headers(db, tenancy.acme_admin))
    assert answer.json()["sleep_policy"] == {
        "never_sleep": False, "sleep_after_idle_minutes": None, "idle_measure": "bound",
        "sleep_schedule": None, "sleep_timezone": "UTC", "delete_after_sleep_days": None,
        "deletion_warned_at": None, "deletes_at": None}


@pytest.mark.parametrize("user", ["acme_member", "acme_viewer", "globex_admin"])
def test_only_the_tenants_admins_may(client: TestClient, db: Session, tenancy: Tenancy,
                                     train: VirtualCluster, user: str) -> None:
    answer = client.put(URL, json=POLICY, headers=headers(db, getattr(tenancy, user)))
    assert answer.status_code in (403, 404)
    assert _events(db) == []


@pytest.mark.parametrize(("change", "field", "message"), [
    ({"sleep_after_idle_minutes": 4}, "sleep_after_idle_minutes", "greater than or equal to 5"),
    ({"sleep_after_idle_minutes": 10081}, "sleep_after_idle_minutes", "less than or equal"),
    ({"delete_after_sleep_days": 0}, "delete_after_sleep_days", "greater than or equal to 1"),
    ({"delete_after_sleep_days": 366}, "delete_after_sleep_days", "less than or equal"),
    ({"sleep_timezone": "Mars/Olympus"}, "sleep_timezone", "not an IANA time zone"),
    ({"sleep_schedule": "weeknights 20:00-08:00"}, "sleep_schedule",
     "'weeknights' is neither days"),
    ({"sleep_schedule": "daily 20:00-26:00"}, "sleep_schedule", "not a window"),
])
def test_bad_values_are_a_422_on_their_field(
    client: TestClient, db: Session, tenancy: Tenancy, train: VirtualCluster,
    change: dict[str, Any], field: str, message: str
) -> None:
    answer = client.put(URL, json={**POLICY, **change}, headers=headers(db, tenancy.acme_admin))
    assert answer.status_code == 422
    errors = answer.json()["errors"]
    assert any(e["field"] == field and message in e["message"] for e in errors), errors
    assert _events(db) == []


def test_changing_the_deletion_rule_withdraws_a_warning(
    client: TestClient, db: Session, tenancy: Tenancy, train: VirtualCluster
) -> None:
    client.put(URL, json=POLICY, headers=headers(db, tenancy.acme_admin))
    train.deletion_warned_at = train.deletion_due_at = utcnow()
    db.commit()
    client.put(URL, json={**POLICY, "sleep_after_idle_minutes": 60},
               headers=headers(db, tenancy.acme_admin))
    db.refresh(train)
    assert train.deletion_warned_at is not None  # the deletion rule did not change
    client.put(URL, json={**POLICY, "delete_after_sleep_days": 30},
               headers=headers(db, tenancy.acme_admin))
    db.refresh(train)
    assert train.deletion_warned_at is None and train.deletion_due_at is None


def test_a_cluster_being_deleted_keeps_its_policy(
    client: TestClient, db: Session, tenancy: Tenancy, train: VirtualCluster
) -> None:
    train.deletion_requested_at = utcnow()
    db.commit()
    answer = client.put(URL, json=POLICY, headers=headers(db, tenancy.acme_admin))
    assert answer.status_code == 409
