"""Utilisation through the API and the pages: a cluster's and a tenant's figures, the admins'
idle-GPU view, each caller seeing only their tenants; without Prometheus every figure unknown
(null with a reason, "unknown" on the page), never zero, and answered within the bound."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.database.core import Database
from app.kit.config import Settings
from app.process.asgi import create_app
from tests.support.fake_prometheus import fake_prometheus, refusing_url, silent_prometheus
from tests.support.tenancy import Tenancy, build_tenancy, headers
from tests.support.web import HTML
from tests.utilisation.support import answers, build_fleet

TRAIN = "/api/v1/tenants/acme/clusters/train/utilisation"
# Where Prometheus answers, a bound no loaded test machine reaches; the slow paths set their own.
GENEROUS = 30.0


@pytest.fixture
def tenancy(db: Session) -> Tenancy:
    tenancy = build_tenancy(db, nodes=0)
    build_fleet(db, tenancy)
    return tenancy


def _client(settings: Settings, database: Database, url: str | None,
            timeout: float = GENEROUS) -> TestClient:
    return TestClient(create_app(settings.model_copy(update={
        "prometheus_url": url, "prometheus_timeout_seconds": timeout}), database))


@pytest.fixture
def with_prometheus(settings: Settings, database: Database) -> Iterator[TestClient]:
    with fake_prometheus(answers()) as url, _client(settings, database, url) as client:
        yield client


def test_a_cluster_shows_its_gpus_now_and_over_the_day(
        with_prometheus: TestClient, db: Session, tenancy: Tenancy) -> None:
    shown = with_prometheus.get(TRAIN, params={"history": "true"},
                                headers=headers(db, tenancy.acme_viewer))
    assert shown.status_code == 200, shown.text
    body = shown.json()
    assert body["known"], body["reason"]
    assert (body["gpus_bound"], body["gpus_idle"]) == (2, 1)
    assert body["utilisation_percent"] == 40.5
    assert body["framebuffer_used_mib"] == 41_000
    # globex's pod on the same node at 99% is not in acme's mean.
    assert {p["utilisation_percent"] for p in body["history"]} == {40.0}
    assert len(body["history"]) == 97


def test_a_tenant_sees_all_its_gpus_and_never_another_tenants(
        with_prometheus: TestClient, db: Session, tenancy: Tenancy) -> None:
    body = with_prometheus.get("/api/v1/tenants/acme/utilisation",
                               headers=headers(db, tenancy.acme_member)).json()
    assert (body["gpus_bound"], body["gpus_idle"]) == (3, 2)
    assert [(c["cluster"], c["utilisation"]["gpus_bound"]) for c in body["clusters"]] == [
        ("train", 2), (None, 1)]
    assert "rival" not in str(body)
    refused = with_prometheus.get("/api/v1/tenants/globex/utilisation",
                                  headers=headers(db, tenancy.acme_admin))
    assert refused.status_code == 404
    hidden = with_prometheus.get("/api/v1/tenants/globex/clusters/rival/utilisation",
                                 headers=headers(db, tenancy.acme_admin))
    assert hidden.status_code == 404


def test_admins_see_every_idle_gpu_by_tenant_and_cluster(
        with_prometheus: TestClient, db: Session, tenancy: Tenancy) -> None:
    body = with_prometheus.get("/api/v1/admin/idle-gpus",
                               headers=headers(db, tenancy.platform_admin)).json()
    assert [(g["tenant"], g["cluster"], g["uuid"]) for g in body["items"]] == [
        ("acme", None, "GPU-3"), ("acme", "train", "GPU-2"), ("globex", "rival", "GPU-4")]
    page = with_prometheus.get("/admin/idle-gpus",
                               headers={**HTML, **headers(db, tenancy.platform_admin)}).text
    assert 'data-tenant="globex" data-cluster="rival"' in page
    assert "GPU-1" not in page
    refused = with_prometheus.get("/api/v1/admin/idle-gpus",
                                  headers=headers(db, tenancy.acme_admin))
    assert refused.status_code == 403


def test_the_cluster_page_shows_utilisation_now_idle_gpus_and_a_chart(
        with_prometheus: TestClient, db: Session, tenancy: Tenancy) -> None:
    page = with_prometheus.get("/t/acme/clusters/train",
                               headers={**HTML, **headers(db, tenancy.acme_viewer)}).text
    assert 'hx-get="/t/acme/clusters/train/utilisation"' in page
    panel = with_prometheus.get("/t/acme/clusters/train/utilisation",
                                headers={**HTML, **headers(db, tenancy.acme_viewer)}).text
    assert "Utilisation now: <strong>40%</strong>" in panel
    assert '<strong id="gpus-idle">1</strong>' in panel
    assert "<svg" in panel and "last 24 hours" in panel


def _unknown_everywhere(client: TestClient, db: Session, tenancy: Tenancy,
                        reason: str) -> None:
    viewer = headers(db, tenancy.acme_viewer)
    body = client.get(TRAIN, params={"history": "true"}, headers=viewer).json()
    assert body["known"] is False and reason in body["reason"]
    assert [body[k] for k in ("utilisation_percent", "gpus_bound", "gpus_idle", "history")] == [
        None, None, None, None]
    tenant = client.get("/api/v1/tenants/acme/utilisation", headers=viewer).json()
    assert (tenant["known"], tenant["gpus_idle"]) == (False, None)
    idle = client.get("/api/v1/admin/idle-gpus",
                      headers=headers(db, tenancy.platform_admin)).json()
    assert (idle["known"], idle["items"]) == (False, None)
    panel = client.get("/t/acme/clusters/train/utilisation", headers={**HTML, **viewer}).text
    assert "Utilisation: <strong>unknown</strong>" in panel and "0%" not in panel
    page = client.get("/admin/idle-gpus",
                      headers={**HTML, **headers(db, tenancy.platform_admin)}).text
    assert "Idle GPUs: <strong>unknown</strong>" in page


def test_without_an_address_every_figure_is_unknown(
        client: TestClient, db: Session, tenancy: Tenancy) -> None:
    _unknown_everywhere(client, db, tenancy, "PORTAL_PROMETHEUS_URL is not set")


def test_prometheus_down_makes_every_figure_unknown(
        settings: Settings, database: Database, db: Session, tenancy: Tenancy) -> None:
    with _client(settings, database, refusing_url()) as client:
        _unknown_everywhere(client, db, tenancy, "unreachable")


def test_prometheus_that_never_answers_is_unknown_within_the_bound(
        settings: Settings, database: Database, db: Session, tenancy: Tenancy) -> None:
    with silent_prometheus() as url, _client(settings, database, url, timeout=0.5) as client:
        viewer = headers(db, tenancy.acme_viewer)
        started = time.monotonic()
        body = client.get(TRAIN, params={"history": "true"}, headers=viewer).json()
        # Four queries, none answered: one bound for all, below httpx's own 5 s for one.
        assert time.monotonic() - started < 5
        assert (body["known"], body["gpus_idle"]) == (False, None)
        assert "in time" in body["reason"]

