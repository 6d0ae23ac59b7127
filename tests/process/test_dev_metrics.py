"""`portal dev` is web and worker in one process, and serves their metrics apart as `portal
serve` and `portal worker` do: ``PORTAL_METRICS_ADDRESS`` its web app's requests,
``PORTAL_WORKER_METRICS_ADDRESS`` the business gauges and the worker's reconciles and passes,
so that a Prometheus scraping both (the lab's) finds each family under the job the rules
expect, and once."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.waiting import wait_for
from tests.support.web import free_port
from tests.test_cli import STARTS_WITHIN, running_dev

WEB_ONLY = {"portal_http_requests_total", "portal_http_request_duration_seconds_count"}
WORKER_ONLY = {"portal_reconcile_total", "portal_worker_last_pass_timestamp_seconds",
               "portal_workqueue_depth", "portal_quota_requests_pending"}


def _series(url: str) -> dict[str, list[dict[str, str]]]:
    """Each sample name of the exposition at ``url``, with the labels of its series; empty
    while nothing answers there."""
    try:
        text = httpx.get(url, timeout=10).text
    except httpx.TransportError:
        return {}
    found: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(dict(sample.labels))
    return found


def test_portal_dev_serves_the_webs_and_the_workers_metrics_on_their_own_addresses(
        tmp_path: Path) -> None:
    web, worker = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    with running_dev(tmp_path, PORTAL_METRICS_ADDRESS=web,
                     PORTAL_WORKER_METRICS_ADDRESS=worker) as (base, _):
        assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200
        web_series = wait_for(
            lambda: _with(_series(f"http://{web}/metrics"), "portal_http_requests_total",
                          route="/healthz", method="GET", status="200"),
            f"the web's metrics on {web}", timeout=STARTS_WITHIN)
        worker_series = wait_for(
            lambda: _with(_series(f"http://{worker}/metrics"), "portal_reconcile_total",
                          kind="quota-expiry", outcome="success"),
            f"the worker's metrics on {worker}, after its first pass", timeout=STARTS_WITHIN)
    assert web_series.keys() >= WEB_ONLY
    assert not WORKER_ONLY & web_series.keys(), "the worker's families on the web's address"
    assert worker_series.keys() >= WORKER_ONLY
    assert not WEB_ONLY & worker_series.keys(), "the web's requests on the worker's address"


def _with(series: dict[str, list[dict[str, str]]], name: str,
          **labels: str) -> dict[str, list[dict[str, str]]] | None:
    """``series`` once the one named, with these labels, is in it."""
    return series if labels in series.get(name, []) else None
