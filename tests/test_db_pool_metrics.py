"""The database pool on ``/metrics``: connections a process holds now
(``portal_db_pool_connections_in_use{process}``) and how long checkouts waited
(``portal_db_pool_checkout_wait_seconds``), as an operator reads them while a request waits for
the one connection another holds; under ``--workers N`` the live processes' sum."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest, multiprocess

from app.database import core as app_db
from app.database.core import Database
from app.kit.config import Settings
from tests.http.test_metrics import sample
from tests.support import postgres
from tests.support.paths import ROOT
from tests.support.serving import serving

TOKEN = "scrape-" + "p" * 40
IN_USE = "portal_db_pool_connections_in_use"
WAIT = "portal_db_pool_checkout_wait_seconds"
HOLD_SECONDS = 2.0
# The probe's wait: the hold, less the time its request took to reach the pool.
WAITED_AT_LEAST = "1.0"


@pytest.fixture(params=["postgresql", "sqlite"])
def one_connection(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A pool of one connection: a second checkout waits until the first is given back."""
    pool: dict[str, Any] = {"pool_size": 1, "max_overflow": 0, "pool_timeout": 60}
    if request.param == "postgresql":
        template = request.getfixturevalue("pg_template")
        with postgres.cloned_database(template, "gtp_pool", **pool) as database:
            yield database
        return
    path = tmp_path / "portal.db"
    shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
    database = Database(f"sqlite:///{path}", **pool)
    yield database
    database.dispose()


def scrape(base: str) -> str:
    answer = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200
    return answer.text


def unlabelled(text: str, name: str, **labels: str) -> float:
    """A histogram's series without labels of its own (``le`` aside): 0 when absent."""
    if labels:
        return sample(text, name, **labels) or 0.0
    prefix = f"{name} "
    return next((float(line.removeprefix(prefix)) for line in text.splitlines()
                 if line.startswith(prefix)), 0.0)


def test_a_request_waiting_for_a_held_connection_shows_in_use_and_its_wait(
        one_connection: Database, settings: Settings) -> None:
    settings = settings.model_copy(update={"metrics_token": TOKEN})
    with serving(settings, one_connection) as base, ThreadPoolExecutor(1) as pool:
        before = scrape(base)
        with one_connection.session() as held:
            held.connection()
            during = scrape(base)
            ready = pool.submit(httpx.get, f"{base}/readyz")  # needs the pool's connection
            time.sleep(HOLD_SECONDS)
            assert not ready.done()
        assert ready.result().status_code == 200
        after = scrape(base)

    in_use = [sample(text, IN_USE, process="web") or 0.0 for text in (before, during, after)]
    assert in_use[1] - in_use[0] == 1
    assert in_use[2] == in_use[0]
    # Two checkouts: the held one, at once; the probe's, after the hold.
    assert unlabelled(after, f"{WAIT}_count") - unlabelled(before, f"{WAIT}_count") == 2
    waited_long = [unlabelled(text, f"{WAIT}_count")
                   - unlabelled(text, f"{WAIT}_bucket", le=WAITED_AT_LEAST)
                   for text in (before, after)]
    assert waited_long[1] - waited_long[0] == 1
    waited = unlabelled(after, f"{WAIT}_sum") - unlabelled(before, f"{WAIT}_sum")
    assert waited >= float(WAITED_AT_LEAST)


def _in_use(process: str) -> float:
    return sample(generate_latest().decode(), IN_USE, process=process) or 0.0


def test_a_connection_the_idle_ping_replaces_is_counted_once_under_its_process(
        pg_template: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's pool is counted apart from the web's; a pooled connection the server ended
    while idle is replaced on checkout (the ping), and the checkout counted once."""
    with postgres.cloned_database(pg_template, "gtp_pool", pool_size=1,
                                  max_overflow=0) as cloned:
        database = cloned.count_pool_as("worker")
        web, worker = _in_use("web"), _in_use("worker")
        with database.session() as first:
            first.connection()
            assert (_in_use("web"), _in_use("worker")) == (web, worker + 1)
        assert _in_use("worker") == worker
        with psycopg.connect(postgres.ADMIN_DSN, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s", (database.engine.url.database,))
        later = app_db.monotonic() + app_db.PING_AFTER_IDLE_S
        monkeypatch.setattr(app_db, "monotonic", lambda: later)
        with database.session() as second:
            second.connection()
            assert _in_use("worker") == worker + 1
        assert _in_use("worker") == worker


HOLDER = """
import sys
from app.database.core import Database
session = Database(sys.argv[1]).session()
session.connection()
print("held", flush=True)
sys.stdin.read()
"""


def test_under_several_processes_the_gauge_is_the_live_processes_sum(tmp_path: Path) -> None:
    """What ``portal serve --workers N`` merges: each process's connections, and a process
    that ended leaves the sum (its file is marked dead, as ``portal serve`` does)."""
    folder = tmp_path / "metrics"
    folder.mkdir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(folder), "PYTHONPATH": str(ROOT),
           "PATH": "/usr/bin:/bin"}
    # A file each: a held SQLite connection has begun its transaction, with the write lock.
    holders = [subprocess.Popen([sys.executable, "-c", HOLDER, f"sqlite:///{tmp_path / name}"],
                                cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True) for name in ("one.db", "two.db")]
    try:
        for holder in holders:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert _merged(folder) == 2
        ended = holders[0]
        ended.communicate(timeout=60)
        multiprocess.mark_process_dead(ended.pid, str(folder))  # type: ignore[no-untyped-call]
        assert _merged(folder) == 1
    finally:
        for holder in holders:
            holder.kill()
            holder.wait(timeout=60)


def _merged(folder: Path) -> float:
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, str(folder))  # type: ignore[no-untyped-call]
    return sample(generate_latest(registry).decode(), IN_USE, process="web") or 0.0
