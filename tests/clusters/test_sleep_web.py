"""The cluster page: its sleep, its policy (a form with errors per field), the coming
deletion; the tenant's cluster list shows the Sleeping phase."""

from __future__ import annotations

import re
from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.clusters.models import VirtualCluster
from app.database.core import utcnow
from tests.clusters.test_end_to_end import sign_in_acme_admin
from tests.support.web import HTML, csrf_of

PAGE = "/t/acme/clusters/train"


def _with_train(client: TestClient, db: Session, oidc_issuer: str) -> str:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, client)
    csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)
    client.post("/t/acme/clusters", headers={"X-CSRF-Token": csrf}, follow_redirects=False,
                data={"name": "train", "gpu_class_id": str(gpu_id), "gpus": "4"})
    return csrf


def _train(db: Session) -> VirtualCluster:
    db.expire_all()
    cluster = db.scalar(select(VirtualCluster).where(VirtualCluster.name == "train"))
    assert cluster is not None
    return cluster


def test_an_admin_sets_the_policy_on_the_page(client: TestClient, db: Session,
                                              oidc_issuer: str) -> None:
    csrf = _with_train(client, db, oidc_issuer)
    page = client.get(PAGE, headers=HTML).text
    assert 'id="sleep-policy-form"' in page and "none: it sleeps only when asked" in page
    saved = client.post(f"{PAGE}/sleep-policy", headers={"X-CSRF-Token": csrf},
                        follow_redirects=False,
                        data={"sleep_after_idle_minutes": "45", "sleep_schedule": "sat,sun",
                              "sleep_timezone": "Europe/Berlin",
                              "delete_after_sleep_days": ""})
    assert saved.status_code in (303, 200), saved.text
    train = _train(db)
    assert (train.sleep_after_idle_minutes, train.sleep_schedule, train.sleep_timezone,
            train.delete_after_sleep_days, train.never_sleep) == (
        45, "sat,sun", "Europe/Berlin", None, False)
    assert db.scalar(select(AuditEvent.action).where(
        AuditEvent.action == "virtual_cluster.sleep_policy")) is not None
    page = client.get(PAGE, headers=HTML).text
    assert "sleeps after 45 minutes without a GPU pod bound" in page
    assert "<code>sat,sun</code> (Europe/Berlin)" in page


def test_policy_errors_are_shown_on_their_fields(client: TestClient, db: Session,
                                                 oidc_issuer: str) -> None:
    csrf = _with_train(client, db, oidc_issuer)
    refused = client.post(f"{PAGE}/sleep-policy", headers={**HTML, "X-CSRF-Token": csrf},
                          data={"sleep_after_idle_minutes": "2", "sleep_schedule": "nightly",
                                "sleep_timezone": "Mars/Olympus"})
    assert refused.status_code == 422
    for field in ("sleep_after_idle_minutes", "sleep_schedule", "sleep_timezone"):
        assert f'id="policy-{field}-error"' in refused.text, field
    assert re.search(r'id="policy-sleep_schedule-error"[^>]*>[^<]*nightly', refused.text)
    assert 'value="nightly"' in refused.text  # what was typed stays
    assert _train(db).sleep_schedule is None


def test_a_sleeping_cluster_shows_why_since_when_and_its_coming_deletion(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    _with_train(client, db, oidc_issuer)
    train = _train(db)
    since = utcnow() - timedelta(days=6, hours=12)
    train.power, train.power_reason, train.power_changed_at = "asleep", "idle", since
    train.asleep_since, train.delete_after_sleep_days = since, 7
    train.deletion_warned_at, train.deletion_due_at = utcnow(), since + timedelta(days=7)
    db.commit()
    page = client.get(PAGE, headers=HTML).text
    assert re.search(r'<span class="state state-Sleeping">Asleep</span> since .*\(idle\)', page)
    warning = re.search(r'id="deletion-warning" role="alert"><strong>([^<]*)</strong>', page)
    assert warning is not None
    assert warning[1] == ("This cluster will be deleted on "
                          f"{(since + timedelta(days=7)).strftime('%Y-%m-%d %H:%M:%S UTC')}")
    assert "Wake now" in page
    for listing in ("/t/acme/clusters", "/t/acme"):
        row = re.search(r'data-cluster="train">(.*?)</tr>', client.get(
            listing, headers=HTML).text, re.S)
        assert row is not None
        assert 'class="state state-Sleeping">Sleeping</span> <span class="note">idle' in row[1]
        assert "to be deleted" in row[1]


def test_sleep_now_and_wake_now(client: TestClient, db: Session, oidc_issuer: str) -> None:
    csrf = _with_train(client, db, oidc_issuer)
    client.post(f"{PAGE}/power", headers={"X-CSRF-Token": csrf}, data={"power": "asleep"},
                follow_redirects=False)
    assert (_train(db).power, _train(db).power_reason) == ("asleep", "manual")
    client.post(f"{PAGE}/power", headers={"X-CSRF-Token": csrf}, data={"power": "awake"},
                follow_redirects=False)
    assert _train(db).power == "awake"
