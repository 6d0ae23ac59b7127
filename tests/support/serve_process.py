"""`portal serve` run as operators run it: its own process (and uvicorn's serving processes
under it with ``--workers N``) on a free loopback port, against a test's PostgreSQL database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from app.database.core import Database
from tests.support.waiting import wait_for
from tests.support.web import free_port


@contextmanager
def serving(database: Database, *args: str, env: dict[str, str] | None = None,
            ) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Yields the base URL and the `portal serve` process."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    environment.update(PORTAL_DATABASE_URL=database.engine.url.render_as_string(
        hide_password=False), **(env or {}))
    # A session of its own: a server that does not stop is killed with its serving processes.
    process = subprocess.Popen(
        [sys.executable, "-m", "app.process.cli", "serve", "--port", str(port), *args],
        env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        # Starting takes a few seconds; far longer on a machine busy with other tests.
        wait_for(lambda: _ready(base), f"portal serve on {base}", timeout=180)
        yield base, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
            raise


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz").status_code == 200
    except httpx.TransportError:
        return False


def serving_children(pid: int) -> list[int]:
    """The serving processes uvicorn runs under ``portal serve --workers N``."""
    listed = subprocess.run(["ps", "-ww", "-o", "pid=,stat=,args=", "--ppid", str(pid)],
                            capture_output=True, text=True, check=False).stdout.splitlines()
    # uvicorn's workers are spawned Python processes; beside them sits multiprocessing's
    # resource tracker, and for a moment a worker uvicorn replaced (a zombie, state Z).
    return [int(line.split()[0]) for line in listed
            if "multiprocessing.spawn" in line and not line.split()[1].startswith("Z")]
