"""A real Prometheus for tests: ``make tools`` builds it into .cache/bin (``tools/prometheus``).

    with running_prometheus(tmp_path, [ScrapeJob("portal-worker", ["127.0.0.1:9465"])]) as prom:
        prom.wait_for_scrape("portal-worker")
        prom.wait_for_value('portal_workqueue_depth{kind="clusters"}', 0.0)

It scrapes every second from a config written into ``workdir`` (its TSDB there too), answers on
a free loopback port, and stops (terminate, then kill) when the block ends. Missing program:
a skip, and a failure under ``CI=true``. Every wait and HTTP call is bounded. The process and
its configuration are the lab's (``app/lab/prometheus.py``); the client is the tests'.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.lab.ports import free_port
from app.lab.prometheus import PrometheusError, PrometheusProcess
from app.lab.prometheus import ScrapeJob as ScrapeJob
from app.lab.prometheus import scrape_config as scrape_config
from tests.support.kube_server import tool
from tests.support.waiting import wait_for

READY_SECONDS = 60.0
HTTP_SECONDS = 10.0


@dataclass
class Prometheus:
    """The client: ``url`` is the server's base URL (``http://127.0.0.1:PORT``)."""

    url: str
    log: Path
    http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.http = httpx.Client(base_url=self.url, timeout=HTTP_SECONDS)

    def _data(self, path: str, params: dict[str, str] | None = None) -> Any:
        answer = self.http.get(path, params=params)
        answer.raise_for_status()
        body = answer.json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """``/api/v1/query`` now: the vector's samples, each
        ``{"metric": {labels}, "value": [time, "value"]}``."""
        data = self._data("/api/v1/query", {"query": expr})
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def value(self, expr: str) -> float | None:
        """The one sample ``expr`` gives now, as a float; None when it gives none."""
        samples = self.query(expr)
        assert len(samples) <= 1, f"{expr} gave {len(samples)} series: {samples}"
        return float(samples[0]["value"][1]) if samples else None

    def wait_for_value(self, expr: str, expected: float, timeout: float = READY_SECONDS) -> None:
        """Waits until ``expr`` gives one sample equal to ``expected`` (scrapes come each
        interval, so a value a test just caused shows a scrape later)."""
        wait_for(lambda: self.value(expr) == expected,
                 lambda: f"{expr} == {expected} in Prometheus (now {self.value(expr)})", timeout)

    def targets(self) -> list[dict[str, Any]]:
        """``/api/v1/targets``' active targets (``labels``, ``health``, ``lastError``, ...)."""
        return list(self._data("/api/v1/targets", {"state": "active"})["activeTargets"])

    def rule_groups(self) -> list[dict[str, Any]]:
        """``/api/v1/rules``: the rule groups loaded, each with its ``rules`` and their state."""
        return list(self._data("/api/v1/rules")["groups"])

    def wait_for_scrape(self, job: str, timeout: float = READY_SECONDS) -> list[dict[str, Any]]:
        """Waits until every target of ``job`` has been scraped and is up; returns them."""
        def all_up() -> list[dict[str, Any]] | None:
            found = [t for t in self.targets() if t["labels"].get("job") == job]
            return found if found and all(t["health"] == "up" for t in found) else None

        return wait_for(all_up, lambda: f"job {job} up in Prometheus: {self.targets()}", timeout)

    def close(self) -> None:
        self.http.close()


@contextmanager
def running_prometheus(workdir: Path, jobs: Sequence[ScrapeJob], *, interval: str = "1s",
                       rule_files: Sequence[Path] = ()) -> Iterator[Prometheus]:
    """A Prometheus scraping ``jobs`` every ``interval``, ready when the block starts."""
    server = PrometheusProcess(tool("prometheus"), workdir, f"127.0.0.1:{free_port()}", jobs,
                               interval, rule_files).start()
    prometheus = Prometheus(server.url, server.log)
    try:
        try:
            server.wait_ready(READY_SECONDS)
        except PrometheusError as error:
            raise AssertionError(str(error)) from error
        yield prometheus
    finally:
        prometheus.close()
        server.stop()
