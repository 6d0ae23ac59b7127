"""`portal serve`'s processes share the keep-alive connections evenly: busy clients whose
connections all landed on one process (it alone was awake to accept them) end up spread over all
of them, while clients asking one at a time keep theirs."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.database.core import Database
from app.kit.config import Settings
from app.process.balance import (
    BUSY,
    SHARES_ENV,
    SLACK,
    ConnectionShares,
    NoShares,
    counted_processes,
    create_shares_file,
)
from app.process.serving import BalancedProtocol, serving_app
from tests.support.serve_process import serving, serving_children
from tests.support.waiting import wait_for

CLIENTS = 24
ROUNDS = 50


@pytest.fixture
def shares_file() -> Iterator[Path]:
    path = create_shares_file()
    yield path
    path.unlink(missing_ok=True)


def test_a_process_holding_more_than_its_share_sheds_and_one_within_it_keeps(
        shares_file: Path) -> None:
    busy, idle = ConnectionShares(shares_file), ConnectionShares(shares_file)
    busy.publish(28)
    idle.publish(4)
    assert busy.over_share(28, BUSY) and not idle.over_share(4, BUSY)
    assert not busy.over_share(28, BUSY - 1)  # idle connections are not worth moving
    busy.publish(16 + SLACK)
    idle.publish(15)
    assert not busy.over_share(16 + SLACK, BUSY) and not idle.over_share(15, BUSY)


def test_a_lone_process_never_sheds(shares_file: Path) -> None:
    alone = ConnectionShares(shares_file)
    alone.publish(500)
    assert not alone.over_share(500, BUSY)


def test_a_replacement_process_takes_the_place_of_one_that_died(shares_file: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", f"""
from pathlib import Path
from app.process.balance import ConnectionShares
ConnectionShares(Path({str(shares_file)!r})).publish(30)
"""], check=True)
    assert gone.returncode == 0
    ours = ConnectionShares(shares_file)
    ours.publish(10)
    # The dead process's 30 connections no longer count: ours is the only process left.
    assert not ours.over_share(10, BUSY)
    other = ConnectionShares(shares_file)
    other.publish(0)
    assert ours.over_share(10, BUSY)


def test_a_serving_process_counts_among_the_others_only_once_started(
        shares_file: Path, sqlite_database: Database, settings: Settings,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SHARES_ENV, str(shares_file))
    monkeypatch.setattr(BalancedProtocol, "shares", NoShares())
    app = serving_app(settings.model_copy(update={
        "database_url": sqlite_database.engine.url.render_as_string()}))
    assert counted_processes(shares_file) == set()  # built, still starting: accepts nothing
    with TestClient(app):
        assert counted_processes(shares_file) == {os.getpid()}


def test_busy_connections_all_accepted_by_one_process_end_up_spread_over_both(
        own_pg_database: Database) -> None:
    with serving(own_pg_database, "--workers", "2") as (base, supervisor):
        wait_for(lambda: len(serving_children(supervisor.pid)) == 2,
                 "two serving processes under `portal serve --workers 2`")
        first, second = serving_children(supervisor.pid)
        # Started, not only spawned: a process still starting accepts nothing.
        wait_for(lambda: counted_processes(_shares_of(first)) == {first, second},
                 "both serving processes started and counted in their shares")
        port = int(base.rsplit(":", 1)[1])
        # With the second process stopped, the first alone accepts every connection.
        os.kill(second, signal.SIGSTOP)
        try:
            clients = [_connected(port) for _ in range(CLIENTS)]
            wait_for(lambda: sum(_holders(port, first, second).values()) == CLIENTS,
                     "the first process accepting every connection")
            assert _holders(port, first, second) == {first: CLIENTS}
        finally:
            os.kill(second, signal.SIGCONT)

        # One at a time, nothing queues: no connection is worth moving.
        for client in clients:
            assert _ask(client).getheader("connection") != "close"
        assert _holders(port, first, second) == {first: CLIENTS}

        with ThreadPoolExecutor(CLIENTS) as pool:
            answered = list(pool.map(_ask_repeatedly, clients))
        assert answered == [[200] * ROUNDS] * CLIENTS

        held = _holders(port, first, second)
        assert held.get(first, 0) <= -(-CLIENTS // 2) + SLACK + 1, held
        assert held.get(second, 0) >= CLIENTS // 3, held
        for client in clients:
            client.close()


def _shares_of(pid: int) -> Path:
    """The shared file a serving process's master handed it in its environment."""
    variables = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    prefix = f"{SHARES_ENV}=".encode()
    return Path(next(v for v in variables if v.startswith(prefix))[len(prefix):].decode())


def _ask_repeatedly(client: http.client.HTTPConnection) -> list[int]:
    """Requests one after another on the client's connection, as a keep-alive client sends
    them; a new connection when the server closed the last."""
    return [_ask(client).status for _ in range(ROUNDS)]


def _ask(client: http.client.HTTPConnection) -> http.client.HTTPResponse:
    client.request("GET", "/healthz")
    answer = client.getresponse()
    answer.read()
    return answer


def _connected(port: int) -> http.client.HTTPConnection:
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    client.connect()
    return client


def _holders(port: int, *pids: int) -> dict[int, int]:
    """How many established connections to ``port`` each of ``pids`` holds (Linux's /proc)."""
    established = {fields[9] for fields in _tcp_table() if fields[3] == "01"
                   and int(fields[1].rsplit(":", 1)[1], 16) == port}
    held: dict[int, int] = {}
    for pid in pids:
        for descriptor in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(descriptor)
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in established:
                held[pid] = held.get(pid, 0) + 1
    return held


def _tcp_table() -> list[list[str]]:
    return [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
