"""``portal_tenant_idle_gpus{tenant,gpu_class}`` on the worker's metrics: the GPUs each tenant
holds idle past the window, per class, read from the operator's Prometheus after the scrape's
database transaction ended, at most every 30 s; left out when Prometheus cannot say, with
``portal_utilisation_known`` 0 beside."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest

from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kit.metrics import registry_of
from app.process.business_metrics import (
    IDLE_GAUGE_CACHE_SECONDS,
    BusinessGauges,
    Runner,
    in_background,
)
from tests.http.test_metrics import sample
from tests.support.fake_prometheus import (
    Answers,
    Labels,
    fake_prometheus,
    refusing_url,
    silent_prometheus,
)
from tests.support.tenancy import Tenancy, build_tenancy
from tests.support.waiting import HANG_SECONDS, wait_for
from tests.support.web import free_port
from tests.test_cli import PORTAL, _env, _run
from tests.utilisation.support import IDLE, PEAK, answers, build_fleet

IDLE_GAUGE = "portal_tenant_idle_gpus"


@dataclass
class Fleet:
    database: Database
    product: str
    settings: Settings


@pytest.fixture
def fleet(own_pg_database: Database, settings: Settings) -> Fleet:
    """acme: one busy and one idle GPU in its cluster, an idle dedicated node; globex: one idle
    GPU; a GPU nobody holds (``tests/utilisation/support.py``). Committed: the gauges read in
    sessions of their own."""
    with own_pg_database.session() as db:
        tenancy: Tenancy = build_tenancy(db, nodes=0)
        build_fleet(db, tenancy)
        return Fleet(own_pg_database, tenancy.h100.product, settings)


class Clock:
    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> datetime:
        return self.now


def at_once(work: Callable[[], None]) -> None:
    work()


def gauges(fleet: Fleet, url: str | None, clock: Clock | None = None,
           timeout: float = 30.0, run: Runner = at_once) -> BusinessGauges:
    """The worker's gauges; Prometheus read within the scrape unless ``run`` says otherwise."""
    settings = fleet.settings.model_copy(update={"prometheus_url": url,
                                                 "prometheus_timeout_seconds": timeout})
    return BusinessGauges(fleet.database, [], clock=clock or utcnow, settings=settings, run=run)


def scrape(collector: BusinessGauges) -> str:
    return generate_latest(registry_of(collector)).decode()


def unlabelled(text: str, name: str) -> float | None:
    prefix = f"{name} "
    return next((float(line.removeprefix(prefix)) for line in text.splitlines()
                 if line.startswith(prefix)), None)


class Watched(dict[str, list[tuple[Labels, float]]]):
    """The fake Prometheus's instant answers, noting at each query how many connections the
    worker's pool had checked out while it was asked."""

    def __init__(self, answers: Answers, database: Database) -> None:
        super().__init__(answers.instant)
        self.database = database
        self.held: list[int] = []

    def get(self, key: str, default: Any = None) -> Any:
        self.held.append(self.database.engine.pool.checkedout())  # type: ignore[attr-defined]
        return super().get(key, default)


def test_idle_gpus_per_tenant_and_class_are_read_after_the_transaction(fleet: Fleet) -> None:
    given = answers()
    watched = Watched(given, fleet.database)
    given.instant = watched
    with fake_prometheus(given) as url:
        text = scrape(gauges(fleet, url))

    # acme: its cluster's idle GPU and its dedicated node's; globex: its pod's. The GPU that is
    # nobody's and acme's busy one are not counted.
    assert sample(text, IDLE_GAUGE, tenant="acme", gpu_class=fleet.product) == 2
    assert sample(text, IDLE_GAUGE, tenant="globex", gpu_class=fleet.product) == 1
    assert text.count(f"{IDLE_GAUGE}{{") == 2
    assert unlabelled(text, "portal_utilisation_known") == 1
    assert unlabelled(text, "portal_quota_requests_pending") == 0  # the others still there
    assert len(watched.held) == 3 and set(watched.held) == {0}, watched.held


def test_a_tenant_whose_gpus_all_compute_shows_zero(fleet: Fleet) -> None:
    given = answers()
    given.instant[PEAK] = [(labels, 90.0) for labels, _ in given.instant[PEAK]]
    with fake_prometheus(given) as url:
        text = scrape(gauges(fleet, url))
    assert sample(text, IDLE_GAUGE, tenant="acme", gpu_class=fleet.product) == 0
    assert sample(text, IDLE_GAUGE, tenant="globex", gpu_class=fleet.product) == 0


def _peak(given: Answers, gpu: Labels, value: float) -> None:
    given.instant[PEAK] = [(labels, value if labels is gpu else peak)
                           for labels, peak in given.instant[PEAK]]


def test_prometheus_is_asked_at_most_every_30_seconds(fleet: Fleet) -> None:
    """A Prometheus scraping the worker every 15 s would otherwise query itself each time."""
    given, clock = answers(), Clock()
    with fake_prometheus(given) as url:
        collector = gauges(fleet, url, clock)
        first = scrape(collector)
        asked = len(given.asked)
        _peak(given, IDLE, 90.0)  # acme's idle GPU computes again
        clock.now += timedelta(seconds=IDLE_GAUGE_CACHE_SECONDS - 1)
        cached = scrape(collector)
        assert len(given.asked) == asked
        clock.now += timedelta(seconds=1)
        fresh = scrape(collector)
        assert len(given.asked) == 2 * asked
    assert sample(first, IDLE_GAUGE, tenant="acme", gpu_class=fleet.product) == 2
    assert sample(cached, IDLE_GAUGE, tenant="acme", gpu_class=fleet.product) == 2
    assert sample(fresh, IDLE_GAUGE, tenant="acme", gpu_class=fleet.product) == 1


def test_without_an_answer_the_gauge_is_left_out_and_known_is_zero(fleet: Fleet) -> None:
    for url in (refusing_url(), None):
        text = scrape(gauges(fleet, url))
        assert IDLE_GAUGE not in text
        assert unlabelled(text, "portal_utilisation_known") == 0
        assert unlabelled(text, "portal_quota_requests_pending") == 0
    with silent_prometheus() as url:
        started = time.monotonic()
        text = scrape(gauges(fleet, url, timeout=1.0))
        assert time.monotonic() - started < 10  # the bound, not a hung scrape
    assert unlabelled(text, "portal_utilisation_known") == 0


def test_a_scrape_never_waits_for_prometheus(fleet: Fleet) -> None:
    """The worker's Prometheus reading runs beside the scrapes: one that hangs costs the
    gauge its figure (unknown once the bound is reached), never a scrape its answer, however
    short the scraper's timeout."""
    with silent_prometheus() as url:
        collector = gauges(fleet, url, timeout=5.0, run=in_background)
        started = time.monotonic()
        first = scrape(collector)
        assert time.monotonic() - started < 4
        assert "portal_utilisation_known" not in first  # no reading yet
        assert unlabelled(first, "portal_quota_requests_pending") == 0

        def read_once() -> str | None:
            text = scrape(collector)
            return text if "portal_utilisation_known" in text else None

        later = wait_for(read_once, "the reading to end at its bound", timeout=60)
    assert unlabelled(later, "portal_utilisation_known") == 0


def test_without_settings_no_utilisation_is_served(fleet: Fleet) -> None:
    text = scrape(BusinessGauges(fleet.database, []))
    assert "portal_utilisation_known" not in text
    assert IDLE_GAUGE not in text


@pytest.fixture
def empty_prometheus() -> Iterator[str]:
    with fake_prometheus(Answers()) as url:
        yield url


def test_portal_worker_serves_the_idle_gauge(tmp_path: Path, empty_prometheus: str) -> None:
    """``portal worker`` gives the gauges its settings: Prometheus answers, with no GPU."""
    assert _run(tmp_path, "db", "upgrade").returncode == 0
    address = f"127.0.0.1:{free_port()}"
    worker = subprocess.Popen(
        [*PORTAL, "worker"], cwd=tmp_path, stderr=subprocess.DEVNULL,
        env=_env(tmp_path, PORTAL_WORKER_METRICS_ADDRESS=address,
                 PORTAL_PROMETHEUS_URL=empty_prometheus))

    def scraped() -> str | None:
        """A scrape after the first reading of Prometheus (the worker's runs beside)."""
        try:
            text = httpx.get(f"http://{address}/metrics", timeout=10).text
        except httpx.TransportError:
            return None
        return text if "portal_utilisation_known" in text else None

    try:
        text = wait_for(scraped, f"the worker's metrics on {address}", timeout=HANG_SECONDS)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=HANG_SECONDS) == 0
    assert unlabelled(text, "portal_utilisation_known") == 1
    assert f"# TYPE {IDLE_GAUGE} gauge" in text
    assert sample(text, "portal_db_pool_connections_in_use", process="worker") is not None
