"""Platform admins see which clusters sleep, why, since when and when they are deleted."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.database.core import utcnow
from tests import factories
from tests.support.tenancy import build_tenancy, headers
from tests.support.web import HTML

URL = "/api/v1/admin/sleeping-clusters"


def test_the_sleeping_clusters_with_why_since_and_deletion(client: TestClient,
                                                           db: Session) -> None:
    t = build_tenancy(db)
    host = factories.host_cluster(db, "gpu-east")
    since = utcnow() - timedelta(days=2)
    factories.cluster(db, t.acme, host, "train", gpus=4, power="asleep", power_reason="idle",
                      power_changed_at=since, asleep_since=since, delete_after_sleep_days=7)
    factories.cluster(db, t.globex, host, "eval", power="asleep", power_reason="schedule",
                      power_changed_at=since)
    factories.cluster(db, t.acme, host, "awake")
    factories.cluster(db, t.acme, host, "gone", power="asleep",
                      deletion_requested_at=utcnow())
    db.commit()
    answer = client.get(URL, headers=headers(db, t.platform_admin))
    assert answer.status_code == 200, answer.text
    listed = {(c["tenant"], c["cluster"]): c for c in answer.json()["items"]}
    assert sorted(listed) == [("acme", "train"), ("globex", "eval")]
    train = listed[("acme", "train")]
    assert (train["reason"], train["gpus"], train["host_cluster"]) == ("idle", 4, "gpu-east")
    assert train["deletes_at"].startswith((since + timedelta(days=7)).date().isoformat())
    assert listed[("globex", "eval")]["asleep_since"] is None
    assert listed[("globex", "eval")]["deletes_at"] is None
    page = client.get("/admin/fleet/sleeping", headers={**HTML, **headers(db, t.platform_admin)})
    assert page.status_code == 200
    assert 'data-tenant="acme" data-cluster="train"' in page.text
    assert '<td class="reason">schedule</td>' in page.text


def test_only_platform_admins(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    db.commit()
    assert client.get(URL, headers=headers(db, t.acme_admin)).status_code == 403
