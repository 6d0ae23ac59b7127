"""The cluster page: its sleep, its policy (a form with errors per field), the coming
deletion; the tenant's cluster list shows the Sleeping phase."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

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
                              "delete_after_sleep_days": "",
                              # as the form asks on a weekend, when the window holds now
                              "sleep_now": "on"})
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


def _not_now() -> str:
    """A daily window half a day away from now (UTC)."""
    hour = (datetime.now(UTC).hour + 12) % 24
    return f"daily {hour:02d}:00-{hour:02d}:30"


def test_a_schedule_that_sleeps_the_cluster_now_is_said_before_saving(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    csrf = _with_train(client, db, oidc_issuer)
    policy = {"sleep_schedule": "daily", "sleep_timezone": "UTC"}
    checked = client.post(f"{PAGE}/sleep-policy/check",
                          headers={**HTML, "HX-Request": "true", "X-CSRF-Token": csrf},
                          data=policy)
    effect = re.search(r'<div id="sleep-policy-effect" role="status">(.*?)</div>', checked.text,
                       re.S)
    assert effect is not None
    weekday = datetime.now(UTC).strftime("%A")
    assert "<strong>Saving this puts the cluster to sleep at once</strong>: now (" + weekday in (
        effect[1])
    assert 'name="sleep_now"' in effect[1]
    assert _train(db).sleep_schedule is None  # a check saves nothing

    refused = client.post(f"{PAGE}/sleep-policy", headers={**HTML, "X-CSRF-Token": csrf},
                          data=policy)
    assert refused.status_code == 422
    assert re.search(r'name="sleep_now" value="on" aria-invalid="true"', refused.text)
    assert refused.text.count("saving this puts the cluster to sleep at once: tick") == 1
    assert _train(db).sleep_schedule is None

    confirmed = client.post(f"{PAGE}/sleep-policy", headers={"X-CSRF-Token": csrf},
                            data={**policy, "sleep_now": "on"}, follow_redirects=False)
    assert confirmed.status_code == 303
    assert confirmed.headers["location"] == f"{PAGE}#sleep-policy-summary"
    assert _train(db).sleep_schedule == "daily"


def test_a_schedule_outside_now_saves_without_a_word_more(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    csrf = _with_train(client, db, oidc_issuer)
    policy = {"sleep_schedule": _not_now(), "sleep_timezone": "UTC"}
    checked = client.post(f"{PAGE}/sleep-policy/check",
                          headers={**HTML, "HX-Request": "true", "X-CSRF-Token": csrf},
                          data=policy)
    assert "puts the cluster to sleep at once" not in checked.text
    saved = client.post(f"{PAGE}/sleep-policy", headers={"X-CSRF-Token": csrf}, data=policy,
                        follow_redirects=False)
    assert saved.status_code == 303, saved.text
    assert _train(db).sleep_schedule == policy["sleep_schedule"]


def test_the_policy_summary_ends_in_a_full_stop(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    csrf = _with_train(client, db, oidc_issuer)
    schedule = _not_now()
    client.post(f"{PAGE}/sleep-policy", headers={"X-CSRF-Token": csrf}, follow_redirects=False,
                data={"sleep_after_idle_minutes": "30", "sleep_schedule": schedule,
                      "sleep_timezone": "UTC"})
    summary = re.search(r'id="sleep-policy-summary">(.*?)</p>', client.get(
        PAGE, headers=HTML).text, re.S)
    assert summary is not None
    said = " ".join(summary[1].split())
    assert said == (f"Sleep policy: sleeps after 30 minutes without a GPU pod bound; asleep "
                    f"<code>{schedule}</code> (UTC).")
