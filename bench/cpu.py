"""The server's CPU per request for each step of ``bench/run.py``, robust to a busy machine.

req/s and latency on a shared machine depend on what else runs; the CPU seconds the server
process spends (``/proc/<pid>/stat`` utime + stime) per completed request hardly do. Each step
of ``bench/run.py`` is driven for a few seconds at a few connections (wrk, else asyncio) after
a warm-up, and the server's CPU over the step is divided by the requests it completed (and so
is that of the PostgreSQL backends serving its database, which share the machine). Other
work on the machine still inflates the figure somewhat (the caches and the GIL are contended),
never deflates it: ``--repeat`` measures each step several times and keeps the lowest, and
``/healthz`` is measured between the runs, to report each step's CPU as a multiple of its.
``--baseline DIR`` runs a second server from another checkout (``git archive COMMIT | tar -x
-C DIR``) and alternates their runs, for a before/after on the same machine at the same time.

Run from the checkout: ``.venv/bin/python -m bench.cpu [--scale 0.1] [--only nodes]``; the last
line of stdout is one JSON object. The database (default ``portal_bench_cpu``) is re-created
from its seeded template, as ``bench/run.py`` does. ``--profile`` prints the server's pid and
waits before the steps, so that ``py-spy record -p PID`` can attach.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

if __package__ in (None, ""):  # run as a file: bench/ is on sys.path, the checkout is not
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import load, seed
from bench.load import Request
from bench.portal import TICKS, Credentials, Portal, bearer, mint
from bench.run import HEALTHZ, LOGS, Step, say, steps

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/portal_bench_cpu"


def measuring_parser(description: str | None, repeat: int) -> argparse.ArgumentParser:
    """The options every CPU-per-request benchmark takes (this one, ``bench.lower_bound``)."""
    parser = argparse.ArgumentParser(description=(description or "").split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="the seeded fleet's size")
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--seconds", type=float, default=4.0, help="per step, after a warm-up")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=repeat,
                        help="keep the lowest of this many")
    return parser


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = measuring_parser(__doc__, repeat=1)
    parser.add_argument("--only", default="", help="steps whose name contains this text")
    parser.add_argument("--baseline", default="",
                        help="another checkout to measure alongside, runs alternating")
    parser.add_argument("--profile", type=float, default=0.0,
                        help="seconds to wait after printing the server's pid")
    return parser.parse_args(argv)


def me(credentials: Credentials) -> Step:
    """A signed-in request with one small query: what any API call costs before its own work."""
    return Step("GET /api/v1/me", "read",
                [Request("GET", "/api/v1/me", bearer(t.token)) for t in credentials.tenants])


def backend_cpu_s(url: str) -> float:
    """CPU seconds of the PostgreSQL backends serving the database (the portal's pool)."""
    with psycopg.connect(seed.psycopg_url(url)) as connection:
        pids = [row[0] for row in connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()")]
    total = 0.0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue  # gone since
        user, system = stat.rsplit(")", 1)[1].split()[11:13]
        total += (int(user) + int(system)) / TICKS
    return total


@dataclass
class Run:
    cpu_s: float  # the server's, per request
    database_cpu_s: float  # its database backends', per request
    result: load.Result


def cpu_per_request(server: Portal, url: str, step: Step, seconds: float,
                    connections: int) -> Run:
    before, database_before = server.cpu_s(), backend_cpu_s(url)
    result = load.run(server.url, step.requests, duration_s=seconds, connections=connections,
                      tag=secrets.token_hex(4), timeout_s=30, use_wrk=load.has_wrk())
    done = max(1, result.requests)
    return Run((server.cpu_s() - before) / done,
               (backend_cpu_s(url) - database_before) / done, result)


def measure(servers: dict[str, Portal], url: str, step: Step, seconds: float,
            connections: int, repeat: int) -> list[dict[str, Any]]:
    """Per server, the step's lowest CPU per request, and that over /healthz's measured between
    its runs (a busy machine slows both alike, so the ratio moves less than either). With two
    servers (two checkouts), their runs alternate, so that both see the same machine."""
    floor: dict[str, list[float]] = {label: [] for label in servers}
    own: dict[str, list[Run]] = {label: [] for label in servers}
    for server in servers.values():
        cpu_per_request(server, url, step, 1, connections)  # warm-up
    for _ in range(repeat):
        for label, server in servers.items():
            floor[label].append(
                cpu_per_request(server, url, HEALTHZ, seconds / 2, connections).cpu_s)
            own[label].append(cpu_per_request(server, url, step, seconds, connections))
    rows = []
    for label in servers:
        best = min(own[label], key=lambda run: run.cpu_s)
        lowest_floor = min(floor[label])
        rows.append({
            "server": label, "step": step.name, "requests": best.result.requests,
            "failed": best.result.failed, "cpu_ms_per_request": round(1000 * best.cpu_s, 3),
            "database_cpu_ms_per_request": round(
                1000 * min(r.database_cpu_s for r in own[label]), 3),
            "rps": round(best.result.rps, 1), "floor_cpu_ms": round(1000 * lowest_floor, 3),
            "times_floor": round(best.cpu_s / lowest_floor, 2)})
    return rows


def checkout_portal(url: str, log: Path, checkout: Path) -> Portal:
    """``portal serve`` from another checkout of the project (e.g. ``git archive`` of a
    commit), with this checkout's virtualenv."""
    server = Portal(url, log)
    server.cwd = checkout
    server.env["PYTHONPATH"] = str(checkout)
    server.command = lambda: [sys.executable, "-m", "app.process.cli", "serve",  # type: ignore[method-assign]
                              "--host", "127.0.0.1", "--port", str(server.port)]
    return server


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    fleet = seed.Fleet.scaled(options.scale)
    seed.prepare(options.database_url, fleet, log=say)
    credentials = mint(options.database_url, fleet)
    log = LOGS / f"{seed.database_name(options.database_url)}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    servers = {"this": Portal(options.database_url, log)}
    if options.baseline:
        servers = {"baseline": checkout_portal(options.database_url,
                                               log.with_suffix(".baseline.log"),
                                               Path(options.baseline).resolve()),
                   **servers}
    try:
        for server in servers.values():
            server.start()
        if options.profile:
            say(f"server pids {[s.process.pid for s in servers.values() if s.process]}")
            time.sleep(options.profile)
        chosen = [step for step in [me(credentials), *steps(credentials)]
                  if options.only in step.name]
        rows = [row for step in chosen
                for row in measure(servers, options.database_url, step, options.seconds,
                                   options.connections, options.repeat)]
    finally:
        for server in servers.values():
            server.stop()
    print_rows(rows, options.connections)
    return 0


def print_rows(rows: list[dict[str, Any]], connections: int) -> None:
    """A line per row, then the last line: one JSON object with every figure."""
    for row in rows:
        print(f"{row['server']:>8} {row['cpu_ms_per_request']:>6.2f} ms/req "
              f"{row['times_floor']:>6.2f}x floor ({row['floor_cpu_ms']:.2f}) "
              f"+ db {row['database_cpu_ms_per_request']:>5.2f} ms {row['rps']:>7.1f} req/s "
              f"{row['failed']:>4} failed  {row['step']}")
    print(json.dumps({"connections": connections, "steps": rows}))


if __name__ == "__main__":
    sys.exit(main())
