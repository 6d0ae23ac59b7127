"""The portal at GPU-cloud scale: every list, page and write next to /healthz, then overload.

Seeds PostgreSQL like a large GPU cloud (``bench/seed.py``; 1,000 tenants, 10,000 clusters,
20,000 nodes, 200,000 audit events), starts ``portal serve`` in production mode and its
production process model (one serving process per CPU it may use; ``--workers N`` for another),
drives it with 32 concurrent clients on loopback (wrk, else asyncio) and prints, per endpoint,
req/s, p50, p99, the server's CPU per request (its master and workers together) and the ratio to
/healthz measured in the same run (the mean of a run first and last), against issue 31's targets
(p99 <= 150 ms for an API list, <= 300 ms for a page or a write; no errors). Then the overload
step: 128
connections on one token, then over 32 tokens, with 503s, other 5xx, stalls and the time until
an authenticated request is back to its normal latency. The last line of stdout is one JSON
object with every figure.

Run from the checkout: ``.venv/bin/python bench/run.py [--quick] [--scale 0.1]`` (or
``python -m bench.run``). ``--quick`` keeps the fleet-size data and shortens each step.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: bench/ is on sys.path, the checkout is not
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import psycopg

from bench import load, report, seed
from bench.load import Request, portal_client
from bench.portal import Credentials, Portal, bearer, browser, mint
from bench.report import Overload, Row

CONNECTIONS = 32
OVERLOAD_FACTOR = 4
# Each step first runs this long unmeasured, at its concurrency: its first requests find the
# processes cold for it (a template compiled, statements prepared, caches filled), and in a
# 6-s step of --quick those few requests were its p99 rather than the endpoint's.
WARM_UP_S = 1.0
DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/portal_bench"
LOGS = seed.ROOT / ".cache" / "bench"
JSON = {"Content-Type": "application/json"}
CLUSTERS_STEP = "GET /api/v1/tenants/{t}/clusters"


@dataclass(frozen=True)
class Step:
    name: str
    kind: str  # floor, read, page, write
    requests: list[Request]


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def steps(c: Credentials) -> list[Step]:
    admin = [bearer(t) for t in c.admin_tokens]
    tenants = c.tenants

    def per_tenant(path: str, method: str = "GET", body: str = "") -> list[Request]:
        extra = JSON if body else {}
        return [Request(method, path.format(t=t.slug), {**bearer(t.token), **extra}, body)
                for t in tenants]

    def as_admin(*paths: str) -> list[Request]:
        return [Request("GET", p, h) for p in paths for h in admin]

    def as_member(path: str) -> list[Request]:
        return [Request("GET", path.format(t=t.slug), browser(t.member_cookie)) for t in tenants]

    def page(path: str) -> list[Request]:
        return [Request("GET", path, browser(c.admin_cookie))]

    quota_request = json.dumps({"gpu_class_id": c.gpu_class_id, "gpus": 8,
                                "reason": "bench: capacity for the next training run"})
    token = json.dumps({"name": "bench-{u}", "scopes": ["read"], "expires_in_days": 1})
    cluster = json.dumps({"name": "b-{u}", "placement": "shared-pool",
                          "gpu_class_id": c.gpu_class_id, "gpus": 1, "cpu_millicores": 1000,
                          "memory_mib": 4096})
    return [
        Step(CLUSTERS_STEP, "read",
             per_tenant("/api/v1/tenants/{t}/clusters")),
        Step("GET /api/v1/tenants (platform admin)", "read", as_admin("/api/v1/tenants")),
        Step("GET /api/v1/nodes", "read", as_admin("/api/v1/nodes")),
        Step("GET /api/v1/nodes?gpu_class=&ready=true", "read",
             as_admin(f"/api/v1/nodes?gpu_class={c.gpu_class}&ready=true")),
        Step("GET /api/v1/nodes?tenant={t}", "read",
             as_admin(*(f"/api/v1/nodes?tenant={s}" for s in c.tenants_with_nodes))),
        Step("GET /api/v1/audit (platform admin)", "read", as_admin("/api/v1/audit")),
        Step("GET /api/v1/audit?tenant={t} (tenant admin)", "read",
             per_tenant("/api/v1/audit?tenant={t}")),
        Step("GET /api/v1/tenants/{t}/quota", "read", per_tenant("/api/v1/tenants/{t}/quota")),
        Step("HTML /t/{t} dashboard (member)", "page", as_member("/t/{t}")),
        Step("HTML /t/{t}/clusters (member)", "page", as_member("/t/{t}/clusters")),
        Step("HTML /t/{t}/nodes (member)", "page", as_member("/t/{t}/nodes")),
        Step("HTML /admin/fleet", "page", page("/admin/fleet")),
        Step("HTML /admin/tenants", "page", page("/admin/tenants")),
        Step("HTML /admin/quota-requests", "page", page("/admin/quota-requests")),
        Step("HTML /audit (platform admin)", "page", page("/audit")),
        Step("POST /api/v1/tenants/{t}/quota-requests", "write",
             per_tenant("/api/v1/tenants/{t}/quota-requests", "POST", quota_request)),
        Step("POST /api/v1/tokens", "write", per_tenant("/api/v1/tokens", "POST", token)),
        Step("POST /api/v1/tenants/{t}/clusters", "write",
             per_tenant("/api/v1/tenants/{t}/clusters", "POST", cluster)),
    ]


HEALTHZ = Step("/healthz (floor)", "floor", [Request("GET", "/healthz")])


class Bench:
    def __init__(self, server: Portal, credentials: Credentials, options: argparse.Namespace,
                 use_wrk: bool) -> None:
        self.server = server
        self.credentials = credentials
        self.quick: bool = options.quick
        self.base_s = options.duration or (6.0 if self.quick else 20.0)
        self.overload_s = 10.0 if self.quick else 30.0
        self.timeout_s = 30.0
        self.use_wrk = use_wrk
        self.tag = secrets.token_hex(2)
        self.rss_mb = 0.0
        self.largest_rss_mb = 0.0
        self.only: str = options.only

    def run(self) -> tuple[list[Row], list[Overload]]:
        planned = [step for step in steps(self.credentials) if self.only in step.name]
        single = {step.name: self.check(step) for step in [HEALTHZ, *planned]}
        rows = [self.measure(HEALTHZ, self.base_s)]
        for step in planned:
            rows.append(self.measure(step, self.duration(single[step.name])))
        rows.append(self.measure(HEALTHZ, self.base_s))
        # Before the overload, which may leave the server to be restarted.
        self.rss_mb = self.server.rss_mb()
        self.largest_rss_mb = self.server.largest_rss_mb()
        floor = statistics.mean([rows[0].rps, rows[-1].rps])
        for row in rows:
            row.judge(floor)
        if self.only:
            return rows, []
        clusters = next(r for r in rows if r.name == CLUSTERS_STEP)
        return rows, self.overloads(clusters.rps)

    def duration(self, single_s: float) -> float:
        """Long enough for a slow endpoint to complete a couple of rounds at 32 connections."""
        return max(self.base_s, min(3 * self.base_s, 2 * CONNECTIONS * single_s))

    def check(self, step: Step) -> float:
        """One request of each shape before any load: anything but 2xx/3xx stops the run."""
        slowest = 0.0
        with portal_client(self.server.url, timeout=60) as client:
            first, middle = step.requests[0], step.requests[len(step.requests) // 2]
            for n, request in enumerate([first] if middle is first else [first, middle]):
                sent = request.render(f"{self.tag}-check-{n}")
                begun = time.perf_counter()
                answer = client.request(sent.method, sent.path, headers=sent.headers,
                                        content=sent.body or None)
                slowest = max(slowest, time.perf_counter() - begun)
                if not 200 <= answer.status_code < 400:
                    raise SystemExit(f"{step.name}: {sent.method} {sent.path} answered "
                                     f"{answer.status_code}:\n{answer.text[:2000]}")
        return slowest

    def drive(self, requests: list[Request], duration_s: float, connections: int,
              ) -> tuple[load.Result, float]:
        cpu = self.server.cpu_s()
        result = load.run(self.server.url, requests, duration_s=duration_s,
                          connections=connections, tag=f"{self.tag}-{time.time_ns() % 10**6}",
                          timeout_s=self.timeout_s, use_wrk=self.use_wrk)
        return result, self.server.cpu_s() - cpu

    def measure(self, step: Step, duration_s: float) -> Row:
        say(f"  {step.name}: {duration_s:.0f} s at {CONNECTIONS} connections "
            f"(after {WARM_UP_S:.0f} s unmeasured)")
        self.drive(step.requests, WARM_UP_S, CONNECTIONS)
        result, cpu_s = self.drive(step.requests, duration_s, CONNECTIONS)
        row = Row.of(step.name, step.kind, result, cpu_s)
        row.restarted = self.settle()
        say(f"    {row.rps:.1f} req/s, p50 {row.p50_ms:.1f} ms, p99 {row.p99_ms:.1f} ms, "
            f"errors {row.errors()}")
        return row

    def overloads(self, capacity_rps: float) -> list[Overload]:
        callers = self.credentials.tenants[:CONNECTIONS]
        hammered = callers[0]
        path = "/api/v1/tenants/{}/clusters"
        one = [Request("GET", path.format(hammered.slug), bearer(hammered.token))]
        many = [Request("GET", path.format(t.slug), bearer(t.token)) for t in callers]
        probe = Request("GET", "/api/v1/me", bearer(hammered.token))
        connections = OVERLOAD_FACTOR * CONNECTIONS
        return [self.overload(f"GET {path.format('{t}')}, one token", one, connections, probe,
                              capacity_rps),
                self.overload(f"GET {path.format('{t}')}, {len(many)} tokens", many, connections,
                              probe, capacity_rps)]

    def overload(self, name: str, requests: list[Request], connections: int, probe: Request,
                 capacity_rps: float) -> Overload:
        normal_s = statistics.median(self.timed(probe) for _ in range(20))
        say(f"  overload: {name}: {self.overload_s:.0f} s at {connections} connections")
        errors = self.server.errors_logged()
        result, _cpu = self.drive(requests, self.overload_s, connections)
        recovery_s = self.recovery(probe, normal_s, limit_s=30 if self.quick else 60)
        tokens = len({r.headers["Authorization"] for r in requests})
        figures = Overload.of(name, connections, tokens, result, recovery_s, capacity_rps,
                              self.server.errors_logged() - errors)
        figures.restarted = self.settle()
        say(f"    {figures.completed_rps:.1f} req/s done, {figures.status_503} x 503, "
            f"{figures.other_5xx} other 5xx, longest gap {figures.longest_gap_s} s, "
            f"recovered after {figures.recovery_s} s, {figures.errors_logged} errors logged")
        return figures

    def settle(self) -> bool:
        """Lets the server work off a step's leftovers (restarting it if it cannot)."""
        probe = Request("GET", "/api/v1/me", bearer(self.credentials.admin_tokens[0]))
        return self.server.settle(lambda: self.timed(probe, timeout_s=1.0) < 1.0)

    def timed(self, request: Request, client: httpx.Client | None = None,
              timeout_s: float | None = None) -> float:
        """Seconds for one answer in 2xx/3xx; infinity for anything else."""
        own = client or httpx.Client(base_url=self.server.url,
                                     timeout=timeout_s or self.timeout_s)
        begun = time.perf_counter()
        try:
            answer = own.request(request.method, request.path, headers=request.headers)
            ok = 200 <= answer.status_code < 400
        except httpx.HTTPError:
            ok = False
        finally:
            if client is None:
                own.close()
        return time.perf_counter() - begun if ok else float("inf")

    def recovery(self, probe: Request, normal_s: float, limit_s: float) -> float | None:
        """Seconds after the overload until three requests in a row take a normal time."""
        threshold = max(3 * normal_s, normal_s + 0.05)
        started = time.monotonic()
        streak_began = started
        streak = 0
        with portal_client(self.server.url, timeout=self.timeout_s) as client:
            while time.monotonic() - started < limit_s:
                begun = time.monotonic()
                if self.timed(probe, client) <= threshold:
                    streak_began = begun if streak == 0 else streak_began
                    streak += 1
                    if streak == 3:
                        return streak_began - started
                else:
                    streak = 0
        return None


def process_model(workers: int | None, processes: int) -> str:
    """What ran, in words: the production default or a chosen --workers."""
    if workers is None:
        return f"production (portal serve's default, {processes} serving processes)"
    return f"portal serve --workers {workers}"


def postgres_version(url: str) -> str:
    with psycopg.connect(seed.psycopg_url(url)) as connection:
        row = connection.execute("SHOW server_version").fetchone()
    return str(row[0]).split()[0] if row else "unknown"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true",
                        help="fleet-size data, shorter steps (a few minutes in all)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="shrink (or grow) the seeded fleet, e.g. 0.1")
    parser.add_argument("--database-url", default=DEFAULT_URL,
                        help="the bench database (dropped and re-created; its template is "
                             "<name>_template)")
    parser.add_argument("--duration", type=float, default=None,
                        help="seconds per step (default 6 with --quick, else 20)")
    parser.add_argument("--reseed", action="store_true", help="seed the template again")
    parser.add_argument("--only", default="",
                        help="only the steps whose name contains this text (and the floor); "
                             "no overload step")
    parser.add_argument("--asyncio", action="store_true",
                        help="use the asyncio clients even when wrk is installed")
    parser.add_argument("--workers", type=int, default=None,
                        help="portal serve --workers N (default: its own default, one serving "
                             "process per CPU it may use: the production model)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> int:
    options = parse(argv)
    fleet = seed.Fleet.scaled(options.scale)
    use_wrk = load.has_wrk() and not options.asyncio
    tool = report.wrk_version() if use_wrk else f"asyncio/httpx {httpx.__version__}"
    if not use_wrk:
        say("wrk is not installed (`make bench-tools`): using the asyncio clients")
    started = time.monotonic()
    seeded = seed.prepare(options.database_url, fleet, reseed=options.reseed, log=say)
    seed_s = time.monotonic() - started
    credentials = mint(options.database_url, fleet)
    machine = report.machine(postgres_version(options.database_url), tool)
    log = LOGS / f"{seed.database_name(options.database_url)}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    server = Portal(options.database_url, log, options.workers)
    say(f"portal serve on {server.url} ({' '.join(server.command()[:2])} ...), log in {log}")
    server.start()
    model = process_model(options.workers, server.processes())
    say(f"process model: {model}")
    try:
        bench = Bench(server, credentials, options, use_wrk)
        rows, overloads = bench.run()
        rss = {"model": model, "workers": options.workers, "processes": server.processes(),
               "rss_mb": round(bench.rss_mb, 1), "largest_rss_mb": round(bench.largest_rss_mb, 1),
               "peak_rss_mb": round(server.peak_rss_mb(), 1),
               "restarts": server.restarts, "errors_logged": server.errors_logged()}
    except BaseException:
        say(server.log_tail())
        raise
    finally:
        server.stop()
    figures: dict[str, Any] = {
        "quick": options.quick, "scale": options.scale, "fleet": fleet.__dict__,
        "seeded": seeded, "seed_s": round(seed_s, 1), "connections": CONNECTIONS,
        "process_model": rss["model"], "processes": rss["processes"],
        "floor_rps": round(statistics.mean([rows[0].rps, rows[-1].rps]), 1),
        "machine": machine, "server": rss, "steps": report.as_dicts(rows),
        "overload": report.as_dicts(overloads),
        "targets": {"p99_ms": report.P99_TARGETS_MS, "rss_mb_per_process": report.RSS_TARGET_MB,
                    "stall_s": report.STALL_S, "ratio_informational": report.RATIO_TARGET},
        "total_s": round(time.monotonic() - started, 1),
    }
    figures["passed"] = (all(r.passed for r in rows if r.kind != "floor")
                         and all(o.passed for o in overloads)
                         and rss["largest_rss_mb"] < report.RSS_TARGET_MB
                         and rss["errors_logged"] == 0
                         and not options.only)
    out(report.table(rows, overloads, figures))
    out(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
