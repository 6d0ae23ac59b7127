"""The server's CPU per request for each step of ``bench/run.py``, robust to a busy machine.

req/s and latency on a shared machine depend on what else runs; the CPU seconds the server
spends (``/proc/<pid>/stat`` utime + stime of ``portal serve``'s master and every process below
it) per completed request hardly do. The server runs the production process model (one serving
process per CPU, as ``portal serve`` defaults to) unless ``--workers N`` says otherwise. Each step
of ``bench/run.py`` is driven for a few seconds at a few connections (wrk, else asyncio) after
a warm-up, and the server's CPU over the step is divided by the requests it completed (and so
is that of the PostgreSQL backends serving its database, which share the machine). Other
work on the machine still inflates the figure somewhat (the caches and the GIL are contended),
never deflates it: ``--repeat`` measures each step several times and keeps the lowest, and
``/healthz`` is measured between the runs, to report each step's CPU as a multiple of its.
``--baseline DIR`` runs a second server from another checkout (``git archive COMMIT | tar -x
-C DIR``) and alternates their runs, for a before/after on the same machine at the same time.
The baseline serves a copy of the same rows at its own schema: the bench database is cloned
and migrated to the baseline's Alembic head (down with this checkout's migrations, up with the
baseline's), so that neither side runs on indexes or columns of the other's.

Run from the checkout: ``.venv/bin/python -m bench.cpu [--scale 0.1] [--only nodes]``; the last
line of stdout is one JSON object. The database (default ``portal_bench_cpu``) is re-created
from its seeded template, as ``bench/run.py`` does. ``--profile`` prints the serving processes'
pids and waits before the steps, so that ``py-spy record -p PID`` can attach.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from alembic.config import Config
from alembic.script import ScriptDirectory
from psycopg import sql
from sqlalchemy.engine import make_url

if __package__ in (None, ""):  # run as a file: bench/ is on sys.path, the checkout is not
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.database import migrate
from app.process.serving import usable_cpus
from bench import load, seed
from bench.load import Request
from bench.portal import TICKS, Credentials, Portal, bearer, mint, serving_pids
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
    parser.add_argument("--workers", type=int, default=None,
                        help="serving processes of each server (default: one per CPU it may "
                             "use, portal serve's production default)")
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


# A process's CPU time counts in clock ticks: a run that used fewer than a few is rounding,
# not a measurement, nor is one in which no request completed (a short run on a loaded
# machine, whose first slow page outlasted it), so it runs again, twice as long.
MIN_CPU_S = 2 / TICKS
LONGER_AT_MOST = 4
WARM_UP_S = 1.0


def cpu_per_request(server: Portal, url: str, step: Step, seconds: float,
                    connections: int) -> Run:
    for _ in range(LONGER_AT_MOST):
        run, used = _timed_run(server, url, step, seconds, connections)
        if used >= MIN_CPU_S and run.result.requests > 0:
            break
        seconds *= 2
    return run


def _timed_run(server: Portal, url: str, step: Step, seconds: float,
               connections: int) -> tuple[Run, float]:
    """The run, and the server's CPU seconds in all."""
    before, database_before = server.cpu_s(), backend_cpu_s(url)
    result = load.run(server.url, step.requests, duration_s=seconds, connections=connections,
                      tag=secrets.token_hex(4), timeout_s=30, use_wrk=load.has_wrk())
    used, done = server.cpu_s() - before, max(1, result.requests)
    return Run(used / done, (backend_cpu_s(url) - database_before) / done, result), used


@dataclass(frozen=True)
class Measured:
    """One row of a measurement: a step on a server, whose runs alternate with the others'."""

    label: str
    server: Portal
    url: str
    step: Step


def measure(servers: dict[str, Portal], url: str | dict[str, str], step: Step, seconds: float,
            connections: int, repeat: int) -> list[dict[str, Any]]:
    """Per server, the step's lowest CPU per request, and that over /healthz's measured between
    its runs (a busy machine slows both alike, so the ratio moves less than either). With two
    servers (two checkouts), their runs alternate, so that both see the same machine. ``url``:
    the database, or each server's."""
    urls = url if isinstance(url, dict) else dict.fromkeys(servers, url)
    return measure_alternating([Measured(label, server, urls[label], step)
                                for label, server in servers.items()],
                               seconds, connections, repeat)


def measure_alternating(measured: list[Measured], seconds: float, connections: int,
                        repeat: int) -> list[dict[str, Any]]:
    """``measure`` for any steps on any servers: each repeat runs each in turn, so that what
    is compared (two checkouts, or an endpoint and its twin) sees the same machine."""
    floor: list[list[float]] = [[] for _ in measured]
    own: list[list[Run]] = [[] for _ in measured]
    for one in measured:  # warm-up: caches filled, as under load
        cpu_per_request(one.server, one.url, one.step, min(WARM_UP_S, seconds), connections)
    for _ in range(repeat):
        for index, one in enumerate(measured):
            floor[index].append(
                cpu_per_request(one.server, one.url, HEALTHZ, seconds / 2, connections).cpu_s)
            own[index].append(cpu_per_request(one.server, one.url, one.step, seconds,
                                              connections))
    return [_row(one, runs, floors) for one, runs, floors in zip(measured, own, floor,
                                                                  strict=True)]


def _row(one: Measured, runs: list[Run], floors: list[float]) -> dict[str, Any]:
    best = min(runs, key=lambda run: run.cpu_s)
    lowest_floor = min(floors)
    if lowest_floor <= 0 or best.result.requests == 0:
        raise SystemExit(f"{one.label}: {one.step.name}: no CPU measured for /healthz or no "
                         f"request completed ({best.result.requests} requests, floor "
                         f"{lowest_floor:.4f} s): see its log")
    return {
        "server": one.label, "processes": one.server.processes(), "step": one.step.name,
        "requests": best.result.requests,
        "failed": best.result.failed, "cpu_ms_per_request": round(1000 * best.cpu_s, 3),
        "database_cpu_ms_per_request": round(
            1000 * min(r.database_cpu_s for r in runs), 3),
        "rps": round(best.result.rps, 1), "floor_cpu_ms": round(1000 * lowest_floor, 3),
        "times_floor": round(best.cpu_s / lowest_floor, 2)}


def checkout_portal(url: str, log: Path, checkout: Path, workers: int) -> Portal:
    """``portal serve`` from another checkout of the project (e.g. ``git archive`` of a
    commit), with this checkout's virtualenv."""
    server = Portal(url, log, workers)
    if "workers" not in (checkout / "app" / "process" / "cli.py").read_text():
        say("the baseline's portal serve has no --workers: it runs one process (each row says "
            "how many served)")
        server.workers = None
    server.cwd = checkout
    server.env["PYTHONPATH"] = str(checkout)
    server.command = lambda: [sys.executable, "-m", "app.process.cli", "serve",  # type: ignore[method-assign]
                              "--host", "127.0.0.1", "--port", str(server.port),
                              *server.workers_option()]
    return server


def _scripts(migrations: Path) -> ScriptDirectory:
    config = Config()
    config.set_main_option("script_location", str(migrations))
    return ScriptDirectory.from_config(config)


def heads(migrations: Path) -> set[str]:
    return set(_scripts(migrations).get_heads())


def known_revisions(migrations: Path) -> set[str]:
    return {script.revision for script in _scripts(migrations).walk_revisions()}


def baseline_database(url: str, checkout: Path) -> str:
    """A copy of the bench database (rows, tokens and sessions as minted) at the baseline's
    Alembic head: downgraded with this checkout's migrations when the baseline is older,
    upgraded with the baseline's own when it is newer; a checkout on another branch of the
    migrations is refused (neither side can bring the schema to the other's)."""
    name = seed.database_name(url)
    copy = f"{name}_baseline"
    copy_url = make_url(url).set(database=copy).render_as_string(hide_password=False)
    with psycopg.connect(seed.psycopg_url(url, "postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(copy)))
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(copy), sql.Identifier(name)))
    ours, theirs = heads(migrate.ROOT / "migrations"), heads(checkout / "migrations")
    if theirs == ours:
        return copy_url
    if len(theirs) == 1 and theirs <= known_revisions(migrate.ROOT / "migrations"):
        say(f"baseline database {copy}: down to the baseline's head {', '.join(theirs)}")
        migrate.downgrade(copy_url, next(iter(theirs)))
        return copy_url
    if ours <= known_revisions(checkout / "migrations"):
        say(f"baseline database {copy}: up to the baseline's head {', '.join(theirs)}")
        subprocess.run([sys.executable, "-m", "app.process.cli", "db", "upgrade"],
                       cwd=checkout, check=True, env={**os.environ, "PYTHONPATH": str(checkout),
                                                      "PORTAL_DATABASE_URL": copy_url})
        return copy_url
    raise SystemExit(f"the baseline's migrations (head {', '.join(sorted(theirs))}) and this "
                     f"checkout's (head {', '.join(sorted(ours))}) have diverged: neither can "
                     "bring a copy of the bench database to the other's schema")


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    fleet = seed.Fleet.scaled(options.scale)
    seed.prepare(options.database_url, fleet, log=say)
    credentials = mint(options.database_url, fleet)
    log = LOGS / f"{seed.database_name(options.database_url)}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    # Both servers run the same process model, named: the baseline's default may differ.
    workers = options.workers or usable_cpus()
    servers = {"this": Portal(options.database_url, log, workers)}
    urls = {"this": options.database_url}
    if options.baseline:
        checkout = Path(options.baseline).resolve()
        urls["baseline"] = baseline_database(options.database_url, checkout)
        servers = {"baseline": checkout_portal(urls["baseline"],
                                               log.with_suffix(".baseline.log"), checkout,
                                               workers),
                   **servers}
    try:
        for server in servers.values():
            server.start()
        if options.profile:
            say(f"serving pids {[serving_pids(s.pid) for s in servers.values()]}")
            time.sleep(options.profile)
        chosen = [step for step in [me(credentials), *steps(credentials)]
                  if options.only in step.name]
        rows = [row for step in chosen
                for row in measure(servers, urls, step, options.seconds,
                                   options.connections, options.repeat)]
    finally:
        for server in servers.values():
            server.stop()
    print_rows(rows, options.connections, workers)
    return 0


def print_rows(rows: list[dict[str, Any]], connections: int, workers: int | None = None,
               ) -> None:
    """A line per row, then the last line: one JSON object with every figure."""
    for row in rows:
        print(f"{row['server']:>8} {row['cpu_ms_per_request']:>6.2f} ms/req "
              f"{row['times_floor']:>6.2f}x floor ({row['floor_cpu_ms']:.2f}) "
              f"+ db {row['database_cpu_ms_per_request']:>5.2f} ms {row['rps']:>7.1f} req/s "
              f"{row['failed']:>4} failed  {row['step']}")
    if workers is not None:
        print(f"server: portal serve --workers {workers} (CPU of the master and its workers)")
    print(json.dumps({"connections": connections, "workers": workers, "steps": rows}))


if __name__ == "__main__":
    sys.exit(main())
