"""``GET /metrics``: the requests a process answered, by route template, method and status,
for a scraper with the metrics token (issue 59)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.database.core import Database
from app.kit.config import Settings
from app.process.asgi import create_app
from tests.support.paths import ROOT
from tests.support.sql import statements_during, writes
from tests.support.waiting import HANG_SECONDS

TOKEN = "scrape-" + "x" * 40
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def scraped(settings: Settings, database: Database) -> Iterator[TestClient]:
    settings = settings.model_copy(update={"metrics_token": TOKEN})
    with TestClient(create_app(settings, database)) as test_client:
        yield test_client


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one series in an exposition, None when it is absent."""
    for line in text.splitlines():
        found = re.fullmatch(rf"{name}\{{(?P<labels>.*)\}} (?P<value>\S+)", line)
        if found and dict(re.findall(r'(\w+)="([^"]*)"', found["labels"])) == labels:
            return float(found["value"])
    return None


def test_requests_are_counted_by_route_template_method_and_status(
        scraped: TestClient) -> None:
    for _ in range(3):
        assert scraped.get("/api/v1/tenants/acme").status_code == 401
    assert scraped.get("/no/such/page").status_code == 404
    assert scraped.post("/api/v1/tenants", json={}).status_code == 401

    text = scraped.get("/metrics", headers=AUTH).text

    count = "portal_http_requests_total"
    assert sample(text, count, route="/api/v1/tenants/{tenant}", method="GET",
                  status="401") == 3
    assert sample(text, count, route="unmatched", method="GET", status="404") == 1
    assert sample(text, count, route="/api/v1/tenants", method="POST", status="401") == 1
    assert sample(text, "portal_http_request_duration_seconds_count",
                  route="/api/v1/tenants/{tenant}", method="GET") == 3
    assert "/no/such/page" not in text


def test_an_app_counts_only_its_own_requests(scraped: TestClient, settings: Settings,
                                             database: Database) -> None:
    """Tests make many apps in one process: a second app starts from nothing."""
    scraped.get("/api/v1/me")
    settings = settings.model_copy(update={"metrics_token": TOKEN})
    with TestClient(create_app(settings, database)) as other:
        text = other.get("/metrics", headers=AUTH).text
    assert sample(text, "portal_http_requests_total", route="/api/v1/me", method="GET",
                  status="401") is None


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"},
                                     {"Authorization": f"Basic {TOKEN}"}],
                         ids=["none", "wrong", "not-bearer"])
def test_metrics_need_the_token(scraped: TestClient, headers: dict[str, str]) -> None:
    response = scraped.get("/metrics", headers=headers)
    assert response.status_code == 401
    assert "portal_http" not in response.text
    assert TOKEN not in response.text


def test_metrics_with_the_token_are_prometheus_text(scraped: TestClient) -> None:
    response = scraped.get("/metrics", headers=AUTH)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE portal_http_requests_total counter" in response.text
    assert "# TYPE portal_reconcile_total counter" in response.text


def test_without_a_token_configured_there_are_no_metrics_on_the_public_port(
        client: TestClient) -> None:
    assert client.get("/metrics", headers=AUTH).status_code == 404


def test_metrics_are_not_in_the_api_schema(client: TestClient) -> None:
    assert "/metrics" not in client.get("/openapi.json").json()["paths"]


def test_a_scrape_writes_nothing(scraped: TestClient, database: Database) -> None:
    scraped.get("/metrics", headers=AUTH)
    seen = statements_during(database, lambda: scraped.get("/metrics", headers=AUTH))
    assert writes(seen) == []


def test_a_web_process_shows_no_worker_pass() -> None:
    """Else an alert on the worker's silence would read the web's 0 as a worker stopped. In a
    process of its own: a test before may have run a worker's pass in this one."""
    shown = subprocess.run(
        [sys.executable, "-c", "from app.process.asgi import create_app\n"
         "from app.kit.metrics import exposition\n"
         "from app.kit.config import Settings\n"
         "app = create_app(Settings(env='test', database_url='sqlite://'))\n"
         "print(exposition(app.state.metrics.registry).decode())"],
        capture_output=True, text=True, timeout=HANG_SECONDS, check=True, cwd=ROOT).stdout
    assert "# TYPE portal_reconcile_total counter" in shown
    assert "portal_worker_last_pass_timestamp_seconds" not in shown
