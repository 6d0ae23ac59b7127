"""What a database-backed request costs at the least in this stack, next to ``/healthz``.

Issue 11's target is every list at 0.4 of ``/healthz``'s throughput: CPU per request at most
2.5 times the floor's. This runs the portal's own app (same middlewares, same uvicorn, same
database pool) with probes added in front of its routes, each leaving out more of the portal,
and measures their CPU per request as ``bench.cpu`` does, each as a multiple of ``/healthz``'s:

- ``/_bench/async``: an async endpoint answering a constant: uvicorn, the middlewares and
  FastAPI's routing without a thread hop;
- ``/_bench/select1``: one hop to a database thread, a pooled connection, ``SELECT 1``;
- ``/_bench/tenants/{t}/clusters``: the clusters list's own statement (a page of one tenant's
  clusters with their GPU class and host) on a pooled psycopg connection, its rows encoded
  by pydantic-core (Rust), as the real lists are: no authentication, no authorization, no
  ORM, no response model, no phase or readiness worked out from the conditions;
- the real ``GET /api/v1/me`` and ``GET /api/v1/tenants/{t}/clusters`` with API tokens;
- ``POST /_bench/insert``: one hop, a pooled connection, one ``INSERT`` of the body into a
  table of its own and its ``COMMIT`` (PostgreSQL's defaults: the commit waits for the WAL
  flush), next to the real ``POST /api/v1/tenants/{t}/quota-requests``.

If the raw probe alone costs about 2.5 times the floor, no layering of the real endpoint on this
stack reaches the target; the figures say how far each layer is from it.

Run from the checkout: ``.venv/bin/python -m bench.lower_bound [--repeat 3]``; the last line
of stdout is one JSON object. Same database and seeding as ``bench.cpu``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: bench/ is on sys.path, the checkout is not
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import seed
from bench.cpu import me, measure, measuring_parser, print_rows
from bench.load import Request
from bench.portal import Credentials, Portal, mint
from bench.run import CLUSTERS_STEP, JSON, LOGS, Step, say, steps

PROBES = "/_bench"
QUOTA_REQUEST_STEP = "POST /api/v1/tenants/{t}/quota-requests"
QUOTA_REQUEST = json.dumps({"gpu_class_id": 1, "gpus": 8, "reason": "bench"})


def probe_steps(credentials: Credentials) -> list[Step]:
    raw = [Request("GET", f"{PROBES}/tenants/{t.slug}/clusters") for t in credentials.tenants]
    real = {step.name: step for step in steps(credentials)}  # as bench/run.py drives them
    return [
        Step("probe: async, constant answer", "read", [Request("GET", f"{PROBES}/async")]),
        Step("probe: thread hop + SELECT 1", "read", [Request("GET", f"{PROBES}/select1")]),
        Step("probe: the clusters list's SQL, raw, pydantic-core JSON", "read", raw),
        me(credentials),
        real[CLUSTERS_STEP],
        Step("probe: thread hop + INSERT + COMMIT", "write",
             [Request("POST", f"{PROBES}/insert", JSON, QUOTA_REQUEST)]),
        real[QUOTA_REQUEST_STEP],
    ]


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = measuring_parser(__doc__, repeat=3)
    parser.add_argument("--serve", type=int, default=0, help=argparse.SUPPRESS)
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
    try:
        server.start()
        for step in probe_steps(credentials):
            rows += measure({"this": server}, options.database_url, step, options.seconds,
                            options.connections, options.repeat)
    finally:
        server.stop()
    print_rows(rows, options.connections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
