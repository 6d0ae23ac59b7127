"""Concurrent clients on loopback: wrk with ``bench/wrk.lua``, else an asyncio fallback.

Both take a step's requests in turn (so that tenants, tokens and filters vary from request to
request), turn ``{u}`` into a string unique to the run, and report the same figures: completed
requests, req/s, p50 and p99, statuses, client timeouts and the longest stretch of whole seconds
without a single completion (a stall).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

LUA = Path(__file__).with_name("wrk.lua")
UNIQUE = "{u}"


def portal_client(base_url: str, timeout: float) -> httpx.Client:
    """A client kept across a run's steps. A pooled connection idle past the server's
    keep-alive (uvicorn's 5 s; a step measured meanwhile on a loaded machine lasts that long)
    is closed by the server as the client reuses it: a reset. It is dropped after 1 s idle."""
    return httpx.Client(base_url=base_url, timeout=timeout,
                        limits=httpx.Limits(keepalive_expiry=1.0))


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""

    def render(self, unique: str) -> Request:
        return Request(self.method, self.path.replace(UNIQUE, unique), self.headers,
                       self.body.replace(UNIQUE, unique))

    def plan_line(self) -> str:
        headers = "\x1f".join(f"{name}: {value}" for name, value in self.headers.items())
        parts = (self.method, self.path, headers, self.body)
        if any(c in part for part in parts for c in "\t\n"):
            raise ValueError(f"no tabs or newlines in a planned request: {self}")
        return "\t".join(parts)


@dataclass
class Result:
    requests: int
    duration_s: float
    p50_ms: float
    p99_ms: float
    statuses: dict[int, int]
    timeouts: int = 0
    socket_errors: int = 0
    no_retry_after: int = 0
    longest_gap_s: int = 0

    @property
    def rps(self) -> float:
        return self.requests / self.duration_s if self.duration_s else 0.0

    def count(self, low: int, high: int) -> int:
        return sum(n for status, n in self.statuses.items() if low <= status <= high)

    @property
    def ok(self) -> int:
        return self.count(200, 399)

    @property
    def failed(self) -> int:
        """Answers outside 2xx/3xx, plus requests that got no answer at all."""
        return self.count(400, 599) + self.timeouts + self.socket_errors


def longest_gap(seconds: dict[int, int], started: int, ended: int) -> int:
    """The longest run of whole seconds in [started, ended) without a completion."""
    longest = current = 0
    for second in range(started, ended):
        current = 0 if seconds.get(second) else current + 1
        longest = max(longest, current)
    return longest


def percentile(ordered: list[float], fraction: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def has_wrk() -> bool:
    return shutil.which("wrk") is not None


def run(base_url: str, requests: list[Request], *, duration_s: float, connections: int,
        tag: str, timeout_s: float, use_wrk: bool) -> Result:
    if use_wrk:
        return run_wrk(base_url, requests, duration_s=duration_s, connections=connections,
                       tag=tag, timeout_s=timeout_s)
    # A loop of its own on a thread of its own: the caller's thread may already run one (a
    # notebook, or Playwright's sync API, which keeps its loop set on the thread that uses it).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="load") as pool:
        return pool.submit(asyncio.run, run_async(
            base_url, requests, duration_s=duration_s, connections=connections, tag=tag,
            timeout_s=timeout_s)).result()


def run_wrk(base_url: str, requests: list[Request], *, duration_s: float, connections: int,
            tag: str, timeout_s: float) -> Result:
    with tempfile.NamedTemporaryFile("w", suffix=".plan", delete=False) as plan:
        plan.write("".join(r.plan_line() + "\n" for r in requests))
    try:
        command = ["wrk", f"-t{min(2, connections)}", f"-c{connections}",
                   f"-d{max(1, round(duration_s))}s", f"--timeout={round(timeout_s)}s",
                   "-s", str(LUA), base_url, "--", plan.name, tag]
        done = subprocess.run(command, capture_output=True, text=True, check=False,  # noqa: S603
                              timeout=duration_s + timeout_s + 60)
    finally:
        Path(plan.name).unlink()
    line = next((x for x in done.stdout.splitlines() if x.startswith("BENCH ")), None)
    if line is None:
        raise RuntimeError(f"wrk gave no figures:\n{done.stdout}\n{done.stderr}")
    return parse_wrk(line)


def parse_wrk(line: str) -> Result:
    figures = json.loads(line.removeprefix("BENCH "))
    seconds = {int(k): v for k, v in figures["seconds"].items()}
    return Result(
        requests=figures["requests"], duration_s=figures["duration_us"] / 1e6,
        p50_ms=figures["p50_us"] / 1000, p99_ms=figures["p99_us"] / 1000,
        statuses={int(k): v for k, v in figures["statuses"].items()},
        timeouts=figures["timeouts"], socket_errors=figures["socket_errors"],
        no_retry_after=figures["no_retry_after"],
        longest_gap_s=longest_gap(seconds, figures["started"], figures["ended"]))


@dataclass
class _Tally:
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    seconds: Counter[int] = field(default_factory=Counter)
    timeouts: int = 0
    errors: int = 0
    no_retry_after: int = 0


async def run_async(base_url: str, requests: list[Request], *, duration_s: float,
                    connections: int, tag: str, timeout_s: float) -> Result:
    """The fallback without wrk: one coroutine per connection, httpx on keep-alive."""
    tally = _Tally()
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout_s) as client:
        started = time.time()
        deadline = time.monotonic() + duration_s

        async def connection(number: int) -> None:
            sent = 0
            while time.monotonic() < deadline:
                sent += 1
                request = requests[(sent + number * 7) % len(requests)].render(
                    f"{tag}-{number}-{sent}")
                begun = time.perf_counter()
                try:
                    answer = await client.request(request.method, request.path,
                                                  headers=request.headers,
                                                  content=request.body or None)
                except httpx.TimeoutException:
                    tally.timeouts += 1
                    continue
                except httpx.HTTPError:
                    tally.errors += 1
                    continue
                tally.latencies.append(time.perf_counter() - begun)
                tally.statuses[answer.status_code] += 1
                tally.seconds[int(time.time())] += 1
                if answer.status_code == 503 and "retry-after" not in answer.headers:
                    tally.no_retry_after += 1

        tasks = [asyncio.create_task(connection(n)) for n in range(connections)]
        await asyncio.wait(tasks, timeout=duration_s)
        elapsed = time.time() - started
        for task in tasks:  # as wrk does, answers still on their way at the end are not counted
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    ordered = sorted(tally.latencies)
    return Result(requests=len(ordered), duration_s=elapsed,
                  p50_ms=percentile(ordered, 0.5) * 1000, p99_ms=percentile(ordered, 0.99) * 1000,
                  statuses=dict(tally.statuses), timeouts=tally.timeouts,
                  socket_errors=tally.errors, no_retry_after=tally.no_retry_after,
                  longest_gap_s=longest_gap(tally.seconds, int(started),
                                            int(started + elapsed)))
