"""The real Prometheus of tests/support/prometheus.py scrapes what a test serves, with a bearer
token where asked, reports a dead target down, and loads the portal's alerting rules."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from app.lab.ports import free_port
from tests.deploy.test_prometheus_rules import RULES, _yaml
from tests.support.http_servers import served
from tests.support.prometheus import ScrapeJob, running_prometheus
from tests.support.waiting import wait_for

EXPOSITION = b"""# HELP portal_demo_reconciles_total Reconciles by kind.
# TYPE portal_demo_reconciles_total counter
portal_demo_reconciles_total{kind="clusters"} 42
portal_demo_reconciles_total{kind="nodes"} 7
# HELP portal_demo_depth Items due.
# TYPE portal_demo_depth gauge
portal_demo_depth 3
"""
TOKEN = "scrape-token-1"


class _Exporter(BaseHTTPRequestHandler):
    token: str | None = None

    def do_GET(self) -> None:
        if self.token is not None and self.headers.get("Authorization") != f"Bearer {self.token}":
            self.send_response(401)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(EXPOSITION)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _exporter(token: str | None = None) -> Iterator[str]:
    with served(type("Handler", (_Exporter,), {"token": token})) as port:
        yield f"127.0.0.1:{port}"


def test_a_scraped_series_reads_back_through_the_query_api(tmp_path: Path) -> None:
    with _exporter() as target, running_prometheus(tmp_path, [ScrapeJob("demo", [target])]) as prom:
        [scraped] = prom.wait_for_scrape("demo")
        assert scraped["labels"]["instance"] == target
        prom.wait_for_value('portal_demo_reconciles_total{kind="clusters"}', 42.0, timeout=30)
        assert prom.value("portal_demo_depth") == 3.0
        assert prom.value('sum(portal_demo_reconciles_total{job="demo"})') == 49.0


def test_a_job_with_a_token_sends_it_and_a_dead_target_shows_down(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    with _exporter(token=TOKEN) as guarded, running_prometheus(
            tmp_path, [ScrapeJob("guarded", [guarded], bearer_token=TOKEN),
                       ScrapeJob("dead", [dead])]) as prom:
        prom.wait_for_scrape("guarded")
        down = wait_for(lambda: [t for t in prom.targets()
                                 if t["labels"]["job"] == "dead" and t["health"] == "down"],
                        "the dead target marked down", 30)
        assert down[0]["lastError"]
        assert wait_for(lambda: prom.value('up{job="dead"}') == 0.0, "up 0", 30)


def test_prometheus_loads_the_portal_alerting_rules(tmp_path: Path) -> None:
    with running_prometheus(tmp_path, [], rule_files=[RULES]) as prom:
        loaded = {group["name"] for group in prom.rule_groups()}
    assert loaded == {group["name"] for group in _yaml(RULES)["groups"]}
