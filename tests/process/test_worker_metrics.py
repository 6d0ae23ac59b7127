"""`portal worker` serves its metrics on ``PORTAL_WORKER_METRICS_ADDRESS`` without a token: its
passes, its reconciles and the business gauges read at scrape time."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import httpx

from tests.http.test_metrics import sample
from tests.support.waiting import HANG_SECONDS, wait_for
from tests.support.web import free_port
from tests.test_cli import PORTAL, _env, _run


def test_the_worker_serves_its_metrics_and_the_business_gauges(tmp_path: Path) -> None:
    assert _run(tmp_path, "db", "upgrade").returncode == 0
    address = f"127.0.0.1:{free_port()}"
    worker = subprocess.Popen([*PORTAL, "worker"], cwd=tmp_path, stderr=subprocess.DEVNULL,
                              env=_env(tmp_path, PORTAL_WORKER_METRICS_ADDRESS=address))
    scraped: list[str] = []

    def passed_once() -> bool:
        try:
            text = httpx.get(f"http://{address}/metrics", timeout=10).text
        except httpx.TransportError:
            return False
        scraped.append(text)
        return _last_pass(text) > 0 and sample(text, "portal_reconcile_total",
                                               kind="quota-expiry", outcome="success") == 1

    try:
        wait_for(passed_once, f"the worker's metrics on {address}", timeout=HANG_SECONDS)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=HANG_SECONDS) == 0
    text = scraped[-1]
    assert sample(text, "portal_workqueue_depth", kind="clusters") is not None
    assert "portal_quota_requests_pending 0.0" in text.splitlines()
    assert "# TYPE portal_tenant_gpus gauge" in text


def _last_pass(text: str) -> float:
    """0 before the first pass: the gauge exists only once the worker has made one."""
    prefix = "portal_worker_last_pass_timestamp_seconds "
    return next((float(line.removeprefix(prefix)) for line in text.splitlines()
                 if line.startswith(prefix)), 0.0)
