"""Each endpoint of the bench next to its raw twin, and the health probes next to FastAPI's
minimal endpoint (issue 31, targets 1 and 5).

This runs the portal's own app (same middlewares, uvicorn, pool, access log) with routes added
under ``/_bench/`` (``bench/lower_bound_app.py``, ``bench/twin_app.py``) and measures each
step's server CPU per request as ``bench.cpu`` does:

- the floor: ``/healthz`` next to FastAPI's minimal async endpoint in an app of its own behind
  the request id (with the access line) and the security headers; ``/readyz`` next to the same
  with one thread hop and ``SELECT 1``; each judged: no more than its minimal counterpart;
- probes: an async constant answer in the portal's app, a hop and ``SELECT 1``, a hop and an
  ``INSERT`` with its ``COMMIT``;
- for every endpoint of ``bench/run.py`` and ``GET /api/v1/me``: its first ``--shapes``
  requests, each recorded once warm (its statements, commit, template), checked against its
  twin's answer, then the endpoint and its twin measured, their runs alternating (a load
  that comes and goes weighs on both); the endpoint's CPU over its twin's is judged
  against 2x.

Run from the checkout: ``.venv/bin/python -m bench.lower_bound [--repeat 3] [--only TEXT]``;
the last line of stdout is one JSON object. Same database and seeding as ``bench.cpu``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):  # run as a file: bench/ is on sys.path, the checkout is not
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import seed
from bench.cpu import Measured, me, measure, measure_alternating, measuring_parser
from bench.load import UNIQUE, Request, portal_client
from bench.portal import Credentials, Portal, mint
from bench.run import JSON, LOGS, Step, say, steps

PROBES = "/_bench"
MINIMAL = f"{PROBES}/minimal"
MINIMAL_READY = f"{PROBES}/minimal-ready"
QUOTA_REQUEST = json.dumps({"gpu_class_id": 1, "gpus": 8, "reason": "bench"})
TARGET = 2.0  # issue 31: an endpoint's CPU per request at most this many times its twin's


# Target 5: each health probe (left) costs no more than its minimal counterpart (right).
PROBE_PAIRS = (("GET /healthz", "probe: FastAPI minimal async + request id + security headers"),
               ("GET /readyz", "probe: the same + thread hop + SELECT 1 (what /readyz does)"))


def probe_steps() -> list[Step]:
    (healthz, minimal), (readyz, minimal_ready) = PROBE_PAIRS
    return [
        Step(minimal, "floor", [Request("GET", MINIMAL)]),
        Step(healthz, "floor", [Request("GET", "/healthz")]),
        Step(minimal_ready, "floor", [Request("GET", MINIMAL_READY)]),
        Step(readyz, "floor", [Request("GET", "/readyz")]),
        Step("probe: async, constant answer", "read", [Request("GET", f"{PROBES}/async")]),
        Step("probe: thread hop + SELECT 1", "read", [Request("GET", f"{PROBES}/select1")]),
        Step("probe: thread hop + INSERT + COMMIT", "write",
             [Request("POST", f"{PROBES}/insert", JSON, QUOTA_REQUEST)]),
    ]


@dataclass
class Pair:
    """A real endpoint (its first ``shapes`` requests) and its raw twin."""
    real: Step
    twin: Step
    same_body: bool = True
    differs: str = ""  # where the twin's first answer differed from the real one
    varying: set[str] = field(default_factory=set)  # fields two real writes differ in
    statements: int = 0
    commits: bool = False
    generated: set[str] = field(default_factory=set)  # parameters the twin makes afresh


def endpoints(credentials: Credentials, only: str) -> list[Step]:
    return [step for step in [me(credentials), *steps(credentials)] if only in step.name]


def twin_request(key: str, real: Request) -> Request:
    if real.method == "GET":
        return Request("GET", f"{PROBES}/twin/{key}")
    return Request(real.method, f"{PROBES}/twin/{key}/{{u}}", JSON if real.body else {},
                   real.body)


def send(client: httpx.Client, request: Request) -> httpx.Response:
    return client.request(request.method, request.path, headers=request.headers,
                          content=request.body.encode() or None)


def normalized(body: bytes, marker: str) -> Any:
    return json.loads(body.decode().replace(marker, UNIQUE)) if body else None


def differences(a: Any, b: Any, at: str = "") -> set[str]:
    """The fields (dotted paths; list items by their field names) where two values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        found: set[str] = set()
        for key in a.keys() | b.keys():
            found |= differences(a.get(key), b.get(key), f"{at}.{key}" if at else key)
        return found
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return {d for x, y in zip(a, b, strict=True) for d in differences(x, y, f"{at}[]")}
    return set() if a == b else {at or "(body)"}


def capture(client: httpx.Client, index: int, step: Step, shapes: int) -> Pair:
    """Records each of the step's first requests once warm, and checks its twin's answer."""
    chosen = step.requests[:shapes]
    pair = Pair(Step(step.name, step.kind, chosen),
                Step(f"twin: {step.name}", step.kind,
                     [twin_request(f"{index}.{n}", r) for n, r in enumerate(chosen)]))
    write = step.kind == "write"
    for n, request in enumerate(chosen):
        key, marker = f"{index}.{n}", f"twin{index}x{n}"
        send(client, request.render(f"{marker}w"))  # warm: caches filled, as under load
        client.post(f"{PROBES}/record")
        real = send(client, request.render(marker))
        media_type = real.headers.get("content-type", "").split(";")[0]
        summary = client.post(f"{PROBES}/recorded/{key}", content=json.dumps({
            "status": real.status_code, "media_type": media_type, "body": real.text,
            "marker": marker})).json()
        pair.statements = max(pair.statements, summary["statements"])
        pair.commits = pair.commits or summary["commits"]
        if media_type == "text/html" and not summary["rendered"]:
            pair.same_body, pair.differs = False, "no template render matched the page"
        if write:  # again, to tell what the endpoint generates from what it is given
            client.post(f"{PROBES}/record")
            again = send(client, request.render(f"{marker}b"))
            summary = client.post(f"{PROBES}/recorded/{key}", content=json.dumps({
                "again": f"{marker}b", "status": again.status_code, "body": again.text,
                "media_type": media_type})).json()
            pair.generated |= set(summary["generated"])
        twin = send(client, pair.twin.requests[n].render(f"{marker}t"))
        if write:
            pair.varying |= differences(normalized(real.content, marker),
                                        normalized(again.content, f"{marker}b"))
            apart = differences(normalized(real.content, marker),
                                normalized(twin.content, f"{marker}t")) - pair.varying
        else:
            apart = set() if twin.content == real.content else {"(bytes)"}
        if twin.status_code != real.status_code:
            apart.add(f"status {twin.status_code} != {real.status_code}")
        if apart and pair.same_body:
            pair.same_body, pair.differs = False, f"{key}: {sorted(apart)[:5]}"
    return pair


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = measuring_parser(__doc__, repeat=3)
    parser.add_argument("--serve", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--only", default="", help="endpoints whose name contains this text")
    parser.add_argument("--shapes", type=int, default=16,
                        help="requests of each step recorded, and driven, per endpoint")
    parser.add_argument("--no-twins", action="store_true", help="the probes only")
    return parser.parse_args(argv)


def probing_portal(url: str, log: Path) -> Portal:
    server = Portal(url, log)
    server.command = lambda: [sys.executable, "-m", "bench.lower_bound",  # type: ignore[method-assign]
                              "--serve", str(server.port)]
    return server


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    if options.serve:
        from bench.lower_bound_app import serve
        serve(options.serve)
        return 0
    fleet = seed.Fleet.scaled(options.scale)
    seed.prepare(options.database_url, fleet, log=say)
    credentials = mint(options.database_url, fleet)
    log = LOGS / f"{seed.database_name(options.database_url)}.lower_bound.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    server = probing_portal(options.database_url, log)
    rows: list[dict[str, Any]] = []
    pairs: list[Pair] = []
    try:
        server.start()
        for step in probe_steps():
            rows += measure({"this": server}, options.database_url, step, options.seconds,
                            options.connections, options.repeat)
        if not options.no_twins:
            # Each endpoint measured, with its twin, right after its capture: the writes
            # measured later add rows (audit events, clusters) that a page captured before
            # them would show and its twin would not.
            with portal_client(server.url, timeout=60) as client:
                for index, step in enumerate(endpoints(credentials, options.only)):
                    pair = capture(client, index, step, options.shapes)
                    pairs.append(pair)
                    say(f"{pair.real.name}: {pair.statements} statements, "
                        f"same body: {pair.same_body}")
                    rows += measure_alternating(
                        [Measured("this", server, options.database_url, measured)
                         for measured in (pair.real, pair.twin)],
                        options.seconds, options.connections, options.repeat)
    finally:
        server.stop()
    for row in rows:  # as bench.cpu prints them, then each endpoint against its twin
        print(f"{row['cpu_ms_per_request']:>6.2f} ms/req {row['times_floor']:>6.2f}x floor "
              f"({row['floor_cpu_ms']:.2f}) + db {row['database_cpu_ms_per_request']:>5.2f} ms "
              f"{row['rps']:>7.1f} req/s {row['failed']:>4} failed  {row['step']}")
    floor = judged_probes(rows)
    verdicts = judged(pairs, rows)
    print(json.dumps({"connections": options.connections, "steps": rows, "probes": floor,
                      "twins": verdicts}))
    return 0


def judged_probes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cpu = {row["step"]: row["cpu_ms_per_request"] for row in rows}
    verdicts = []
    for probe, minimal in PROBE_PAIRS:
        ratio = round(cpu[probe] / cpu[minimal], 2) if cpu[minimal] else 0.0
        print(f"{ratio:>6.2f}x minimal ({cpu[probe]:.3f} / {cpu[minimal]:.3f} ms) "
              f"{'pass' if ratio <= 1 else 'FAIL'} {probe}")
        verdicts.append({"probe": probe, "cpu_ms": cpu[probe], "minimal_cpu_ms": cpu[minimal],
                         "times_minimal": ratio, "passed": ratio <= 1})
    return verdicts


def judged(pairs: list[Pair], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per endpoint: its CPU per request over its twin's, against the target."""
    cpu = {row["step"]: row["cpu_ms_per_request"] for row in rows}
    verdicts = []
    for pair in pairs:
        real, twin = cpu[pair.real.name], cpu[pair.twin.name]
        ratio = round(real / twin, 2) if twin else 0.0
        verdict = {"endpoint": pair.real.name, "cpu_ms": real, "twin_cpu_ms": twin,
                   "times_twin": ratio, "statements": pair.statements,
                   "commits": pair.commits, "same_body": pair.same_body,
                   "ignored_fields": sorted(pair.varying),
                   "generated_parameters": sorted(pair.generated),
                   "passed": pair.same_body and ratio <= TARGET}
        print(f"{ratio:>6.2f}x twin ({real:.2f} / {twin:.2f} ms) "
              f"{'pass' if verdict['passed'] else 'FAIL'} {pair.statements:>2} stmts "
              f"{'' if pair.same_body else 'BODY DIFFERS ' + pair.differs + ' '}"
              f"{pair.real.name}"
              + (f" (ignored: {', '.join(sorted(pair.varying))})" if pair.varying else ""))
        verdicts.append(verdict)
    return verdicts


if __name__ == "__main__":
    sys.exit(main())
