"""`portal serve`'s metrics: with several serving processes, any scrape counts every process's
requests (prometheus_client's multiprocess mode, a fresh folder per server), on the metrics
address without a token and on the public port with it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from app.database.core import Database
from app.kit.config import Settings
from app.process.asgi import create_app
from app.process.metrics import metrics_address
from tests.http.test_metrics import sample
from tests.support.waiting import wait_for
from tests.support.web import free_port

TOKEN = "scrape-" + "y" * 40
HEALTH = {"route": "/healthz", "method": "GET", "status": "200"}


@dataclass
class Served:
    base: str
    metrics: str
    scratch: Path  # the server's temporary folder: its metrics folder is made in it


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=10).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture
def served(own_pg_database: Database, tmp_path: Path) -> Iterator[Served]:
    port, metrics_port = free_port(), free_port()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PORTAL_") and k != "PROMETHEUS_MULTIPROC_DIR"}
    env |= {"PORTAL_DATABASE_URL":
            own_pg_database.engine.url.render_as_string(hide_password=False),
            "PORTAL_METRICS_TOKEN": TOKEN,
            "PORTAL_METRICS_ADDRESS": f"127.0.0.1:{metrics_port}", "TMPDIR": str(scratch)}
    base = f"http://127.0.0.1:{port}"
    with (tmp_path / "serve.log").open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.process.cli", "serve", "--port", str(port),
             "--workers", "2"], env=env, stdout=sink, stderr=sink)
        try:
            wait_for(lambda: _answers(f"{base}/healthz"), f"portal serve on {base}",
                     timeout=180)
            yield Served(base, f"http://127.0.0.1:{metrics_port}/metrics", scratch)
        finally:
            process.terminate()
            process.wait(timeout=60)
    assert not list(scratch.glob("portal-metrics-*")), "the metrics folder outlived the server"


def _processes_counting(scratch: Path) -> set[str]:
    """The serving processes that counted a request: each writes its counters to a file of its
    own, named with its process id."""
    return {path.stem.rpartition("_")[2] for path in scratch.glob("portal-metrics-*/counter_*")}


def _health_count(text: str) -> float:
    return sample(text, "portal_http_requests_total", **HEALTH) or 0.0


def test_every_serving_processs_requests_are_in_one_scrape(served: Served) -> None:
    before = _health_count(httpx.get(served.metrics, timeout=10).text)  # the readiness waits
    sent = 0

    def spread_over_both() -> bool:
        nonlocal sent
        for _ in range(10):  # a new connection each: the processes take turns accepting
            assert httpx.get(f"{served.base}/healthz", timeout=10).status_code == 200
            sent += 1
        return len(_processes_counting(served.scratch)) == 2

    wait_for(spread_over_both, "requests answered by both serving processes", timeout=120)
    counted = _health_count(httpx.get(served.metrics, timeout=10).text)
    assert counted - before == sent

    httpx.get(f"{served.base}/healthz", timeout=10)
    public = httpx.get(f"{served.base}/metrics", timeout=10,
                       headers={"Authorization": f"Bearer {TOKEN}"})
    assert public.status_code == 200
    assert _health_count(public.text) == counted + 1
    assert httpx.get(f"{served.base}/metrics", timeout=10).status_code == 401


def test_one_process_serves_its_apps_metrics_on_the_metrics_address_without_a_token(
        settings: Settings, database: Database) -> None:
    app = create_app(settings, database)
    address = f"127.0.0.1:{free_port()}"
    with TestClient(app) as client, metrics_address(address, app.state.metrics.registry):
        client.get("/healthz")
        client.get("/healthz")
        scraped = httpx.get(f"http://{address}/metrics", timeout=10)
        assert httpx.get(f"http://{address}/other", timeout=10).status_code == 404
    assert scraped.status_code == 200
    assert _health_count(scraped.text) == 2
    assert "portal_reconcile_total" in scraped.text
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://{address}/metrics", timeout=2)  # stopped with the server


def test_a_metrics_address_another_process_holds_is_a_warning_not_a_stop(
        caplog: pytest.LogCaptureFixture) -> None:
    address = f"127.0.0.1:{free_port()}"
    with metrics_address(address), caplog.at_level(logging.WARNING, logger="portal"):
        with metrics_address(address):
            ran = True
        assert httpx.get(f"http://{address}/metrics", timeout=10).status_code == 200
    assert ran
    assert f"metrics not served on {address}: Address already in use" in caplog.text
