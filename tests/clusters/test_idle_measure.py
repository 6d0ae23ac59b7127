"""What idle means for a cluster's idle minutes, its choice: bound GPU pods (the default) or GPU
utilisation; set through the API and the cluster page, shown back, bad values refused on
their field."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.clusters.models import VirtualCluster
from tests import factories
from tests.clusters.test_sleep_web import PAGE, _train, _with_train
from tests.support.tenancy import Tenancy, headers
from tests.support.web import HTML

URL = "/api/v1/tenants/acme/clusters/train/sleep-policy"


@pytest.fixture
def train(db: Session, tenancy: Tenancy) -> VirtualCluster:
    cluster = factories.cluster(db, tenancy.acme, factories.host_cluster(db), "train")
    db.commit()
    return cluster


def test_the_api_sets_it_shows_it_and_audits_it(
        client: TestClient, db: Session, tenancy: Tenancy, train: VirtualCluster) -> None:
    admin = headers(db, tenancy.acme_admin)
    shown = client.get("/api/v1/tenants/acme/clusters/train", headers=admin).json()
    assert shown["sleep_policy"]["idle_measure"] == "bound"
    policy = {"sleep_after_idle_minutes": 30, "idle_measure": "utilisation"}
    answer = client.put(URL, json=policy, headers=admin)
    assert answer.status_code == 200, answer.text
    assert answer.json()["sleep_policy"]["idle_measure"] == "utilisation"
    shown = client.get("/api/v1/tenants/acme/clusters/train",
                       headers=headers(db, tenancy.acme_viewer)).json()
    assert shown["sleep_policy"]["idle_measure"] == "utilisation"
    listed = client.get("/api/v1/tenants/acme/clusters", headers=admin).json()
    assert listed["items"][0]["sleep_policy"]["idle_measure"] == "utilisation"
    event = db.scalar(select(AuditEvent).where(
        AuditEvent.action == "virtual_cluster.sleep_policy"))
    assert event is not None and event.before is not None and event.after is not None
    assert (event.before["idle_measure"], event.after["idle_measure"]) == (
        "bound", "utilisation")
    left_out = client.put(URL, json={"sleep_after_idle_minutes": 30}, headers=admin)
    assert left_out.json()["sleep_policy"]["idle_measure"] == "bound"


@pytest.mark.parametrize("bad", ["idle", "", "Utilisation", 1, None])
def test_a_bad_measure_is_a_422_on_its_field(
        client: TestClient, db: Session, tenancy: Tenancy, train: VirtualCluster,
        bad: object) -> None:
    answer = client.put(URL, json={"idle_measure": bad}, headers=headers(db, tenancy.acme_admin))
    assert answer.status_code == 422
    errors = answer.json()["errors"]
    assert any(e["field"] == "idle_measure" and "'bound'" in e["message"]
               and "'utilisation'" in e["message"] for e in errors), errors


def test_the_page_offers_the_choice_in_words_and_keeps_it(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    csrf = _with_train(client, db, oidc_issuer)
    page = client.get(PAGE, headers=HTML).text
    assert re.search(r'type="radio" name="idle_measure" value="bound" checked', page)
    assert "Its GPUs are barely used: each stays below 5% busy" in page
    saved = client.post(f"{PAGE}/sleep-policy", headers={"X-CSRF-Token": csrf},
                        follow_redirects=False,
                        data={"sleep_after_idle_minutes": "30", "idle_measure": "utilisation",
                              "sleep_timezone": "UTC"})
    assert saved.status_code == 303, saved.text
    assert _train(db).idle_measure == "utilisation"
    page = client.get(PAGE, headers=HTML).text
    assert re.search(r'type="radio" name="idle_measure" value="utilisation" checked', page)
    summary = re.search(r'id="sleep-policy-summary">(.*?)</p>', page, re.S)
    assert summary is not None
    assert " ".join(summary[1].split()) == (
        "Sleep policy: sleeps after 30 minutes with its GPUs below 5% busy or no GPU pod "
        "bound.")
    # No Prometheus configured: the page says the reading is unknown and what follows.
    reading = re.search(r'id="sleep-idle-reading">(.*?)</p>', page, re.S)
    assert reading is not None
    assert "<strong>unknown</strong>: Prometheus is not configured" in reading[1]
    assert "it sleeps only once no GPU pod is bound" in reading[1]


def test_a_bad_measure_on_the_page_is_said_on_its_field(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    csrf = _with_train(client, db, oidc_issuer)
    refused = client.post(f"{PAGE}/sleep-policy", headers={**HTML, "X-CSRF-Token": csrf},
                          data={"sleep_after_idle_minutes": "30", "idle_measure": "sometimes"})
    assert refused.status_code == 422
    said = re.search(r'id="policy-idle_measure-error"[^>]*>([^<]*)<', refused.text)
    assert said is not None and "choose one of" in said[1], refused.text
    assert _train(db).sleep_after_idle_minutes is None
