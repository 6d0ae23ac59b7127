"""Bursts of simultaneous writes against real `portal serve` (two processes, the default three
threads each) on real PostgreSQL: for every write route that takes a row lock, 50 requests at
once on one row and 50 on rows of one tenant. Every request is answered within
``ANSWER_BOUND_S`` with a 2xx or a 4xx, never a 5xx or no answer; `/readyz` and another
tenant's reads are answered during the burst; no transaction is left open after it; and the
database's invariants hold (one decision per request, quota never passed, one cluster per name,
one owner per node). On the code before issue 53 the first burst on one row never answered.

The bursts themselves are in ``bursts.py``. ``test_every_write_route_that_locks_a_row_is_burst``
keeps that table whole: a write route that may lock a row (as far as a look through the app
functions it calls can tell) is burst, or named in ``NOT_BURST`` with its reason.
"""

from __future__ import annotations

import ast
import http.client
import inspect
import json
import signal
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.database.concurrency import lock_row
from app.database.core import Database
from app.process.asgi import API_ROUTERS
from app.quotas.models import QuotaRequest
from tests import factories
from tests.http.bursts import BURST, ROUTES, Call, Plan, World, new_tenancy, quota_requests
from tests.support import postgres
from tests.support.principals import bearer
from tests.support.serve_process import serving

# Every answer of a burst comes within this long. Each request holds its row for milliseconds;
# the bound is for a machine busy with other tests, far below a hang.
ANSWER_BOUND_S = 20.0
# /readyz and another tenant's read, asked during a burst, are answered within this long.
PEER_BOUND_S = 10.0
PROCESSES = ("--workers", "2")
# What `portal serve` is given: a grace short enough to wait out in a test.
SHUTDOWN_S = 5.0


# ----- the server and the database, one per module


@pytest.fixture(scope="module")
def contention_database(pg_template: str) -> Iterator[Database]:
    with postgres.cloned_database(pg_template, "gtp_contention") as database:
        yield database


@pytest.fixture(scope="module")
def world(contention_database: Database) -> Iterator[World]:
    with contention_database.transaction() as db:
        platform = bearer(db, factories.user(db, "platform@contention.example", admin=True))
        other = factories.tenant(db, "bystander")
        reader = factories.user(db, "reader@bystander.example")
        factories.membership(db, other, reader, "viewer")
        bystander = bearer(db, reader, "read")
    env = {"PORTAL_WEB_SHUTDOWN_SECONDS": str(SHUTDOWN_S)}
    with serving(contention_database, *PROCESSES, env=env) as (base, _process):
        yield World(contention_database, base, platform, bystander, "bystander")


# ----- one burst


@dataclass
class Outcome:
    statuses: Counter[int]
    samples: dict[int, str]  # an answer's body of each status
    slowest_s: float
    failures: list[str]
    peers: list[str]
    peers_slowest_s: float


def _burst(world: World, calls: list[Call]) -> Outcome:
    """Sends ``calls`` at once, each on a connection of its own, while a bystander asks
    `/readyz` and reads its tenant's clusters."""
    gate = threading.Barrier(len(calls) + 1, timeout=30)
    stop = threading.Event()
    with ThreadPoolExecutor(len(calls) + 1) as pool:
        peers = pool.submit(_ask_as_bystander, world, stop)
        answers = [pool.submit(_send, world.base, call, gate) for call in calls]
        gate.wait()
        results = [answer.result() for answer in answers]
        stop.set()
        peer_failures, peer_slowest = peers.result()
    statuses = Counter(status for status, _, _ in results if status is not None)
    samples = {status: text for status, _, text in reversed(results) if status is not None}
    failures = [f"{call.method} {call.path}: {problem}"
                for call, (status, _, problem) in zip(calls, results, strict=True)
                if status is None or status >= 500]
    return Outcome(statuses, samples, max(seconds for _, seconds, _ in results), failures,
                   peer_failures, peer_slowest)


def _send(base: str, call: Call, gate: threading.Barrier) -> tuple[int | None, float, str]:
    """One request on a connection of its own, opened before the gate lets all go at once.
    (``http.client``: an httpx client each cost more than the burst.)"""
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=ANSWER_BOUND_S)
    try:
        connection.connect()
        gate.wait()
        started = time.monotonic()
        body = json.dumps(call.json).encode() if call.json is not None else None
        headers = {**call.headers, **({"Content-Type": "application/json"} if body else {})}
        try:
            connection.request(call.method, call.path, body=body, headers=headers)
            answer = connection.getresponse()
            text = answer.read().decode(errors="replace")
        except OSError as error:
            return None, time.monotonic() - started, f"no answer ({type(error).__name__})"
        return answer.status, time.monotonic() - started, text[:200]
    finally:
        connection.close()


def _ask_as_bystander(world: World, stop: threading.Event) -> tuple[list[str], float]:
    """What went wrong with the bystander's requests while the burst ran (at least one each),
    and the slowest answer."""
    failures: list[str] = []
    slowest = 0.0
    paths = ("/readyz", f"/api/v1/tenants/{world.bystander_slug}/clusters")
    with httpx.Client(base_url=world.base, timeout=PEER_BOUND_S) as client:
        first = True
        while first or not stop.is_set():
            first = False
            for path in paths:
                started = time.monotonic()
                try:
                    answer = client.get(path, headers=world.bystander)
                    slowest = max(slowest, time.monotonic() - started)
                except httpx.HTTPError as error:
                    failures.append(f"GET {path}: no answer in {PEER_BOUND_S} s "
                                    f"({type(error).__name__})")
                    continue
                if answer.status_code != 200:
                    failures.append(f"GET {path}: {answer.status_code}")
            time.sleep(0.1)
    return failures, slowest


def _left_open(database: Database) -> list[str]:
    """Transactions of `portal serve` still open a moment after every answer came."""
    query = text("SELECT state, left(query, 80) FROM pg_stat_activity "
                 "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                 "AND xact_start IS NOT NULL AND now() - xact_start > interval '1 second'")
    with database.engine.connect() as connection:
        return [f"{state}: {query_text}" for state, query_text in connection.execute(query)]


def _run(world: World, prepare: Callable[[Session, World], Plan]) -> Counter[int]:
    with world.database.transaction() as db:
        plan = prepare(db, world)
    outcome = _burst(world, plan.calls)
    assert outcome.failures == [], outcome.failures
    assert outcome.slowest_s < ANSWER_BOUND_S
    assert outcome.peers == [], outcome.peers
    assert sum(outcome.statuses.values()) == len(plan.calls)
    assert _left_open(world.database) == []
    with world.database.session() as db:
        try:
            plan.holds(db, outcome.statuses)
        except AssertionError as error:
            raise AssertionError(f"{error}; answers: {outcome.samples}") from error
    return outcome.statuses



@pytest.mark.parametrize("one_row", [True, False], ids=["one-row", "rows-of-one-tenant"])
@pytest.mark.parametrize("route", list(ROUTES), ids=[" ".join(key) for key in ROUTES])
def test_a_burst_is_answered_in_full_and_leaves_the_database_whole(
        world: World, route: tuple[str, str], one_row: bool) -> None:
    _run(world, ROUTES[route](one_row))


def _cancel_calls(db: Session, n: int) -> tuple[list[Call], list[int]]:
    t = new_tenancy(db, nodes=0)
    ids = quota_requests(db, t, n)
    return [Call("POST", f"/api/v1/tenants/{t.slug}/quota-requests/{i}/cancel", t.headers)
            for i in ids], ids


def test_twenty_cancels_of_one_request_as_the_issue_sent_them(world: World) -> None:
    with world.database.transaction() as db:
        calls, _ = _cancel_calls(db, 1)
    outcome = _burst(world, calls * 20)
    assert outcome.failures == [] and outcome.peers == []
    assert outcome.statuses == {200: 1, 409: 19}


# As `portal serve` is started here: PORTAL_WEB_LOCK_TIMEOUT_SECONDS's default.
LOCK_TIMEOUT_S = 2.0


def test_a_row_held_elsewhere_is_a_409_with_retry_after_once_the_lock_timeout_passes(
        world: World) -> None:
    """A row the worker (or anything else) holds: requests for it wait the lock timeout, then
    answer 409 with Retry-After and change nothing, while other tenants are served at once."""
    with world.database.transaction() as db:
        calls, [request_id] = _cancel_calls(db, 1)
    with world.database.session() as holder:
        assert lock_row(holder, QuotaRequest, request_id) is not None
        started = time.monotonic()
        answer = httpx.post(f"{world.base}{calls[0].path}", headers=calls[0].headers,
                            timeout=ANSWER_BOUND_S)
        waited = time.monotonic() - started
        outcome = _burst(world, calls * 6)
        holder.rollback()
    assert (answer.status_code, answer.headers.get("Retry-After")) == (409, "1"), answer.text
    assert LOCK_TIMEOUT_S <= waited < LOCK_TIMEOUT_S + PEER_BOUND_S
    assert outcome.failures == [] and outcome.peers == []
    assert outcome.statuses == {409: 6}
    # One tenant's writes hold every thread but one: the bystander never waited for a lock's
    # timeout behind them (3.9 s with 12 of them when they could take all three threads).
    assert outcome.peers_slowest_s < LOCK_TIMEOUT_S
    again = httpx.post(f"{world.base}{calls[0].path}", headers=calls[0].headers,
                       timeout=ANSWER_BOUND_S)
    assert again.status_code == 200, again.text


def test_sigterm_ends_the_server_within_its_grace_during_a_burst(
        contention_database: Database) -> None:
    with contention_database.transaction() as db:
        calls, _ = _cancel_calls(db, BURST)
    env = {"PORTAL_WEB_SHUTDOWN_SECONDS": str(SHUTDOWN_S)}
    with serving(contention_database, *PROCESSES, env=env) as (base, process), \
            ThreadPoolExecutor(1) as pool:
        burst = pool.submit(_answers_during_a_stop, base, calls)
        time.sleep(0.2)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=SHUTDOWN_S + PEER_BOUND_S)
        stopped_in = time.monotonic() - started
        statuses = burst.result()
    assert stopped_in < SHUTDOWN_S + PEER_BOUND_S
    assert [s for s in statuses if s is not None and s >= 500] == []


def _answers_during_a_stop(base: str, calls: list[Call]) -> list[int | None]:
    """Statuses of a burst cut by a stop: None where the server closed the connection."""
    gate = threading.Barrier(len(calls), timeout=30)
    with ThreadPoolExecutor(len(calls)) as pool:
        return [status for status, _, _ in pool.map(lambda c: _send(base, c, gate), calls)]


# ----- the table is whole: every write route that may lock a row is burst above


LOCKS = ("lock_row", "lock_rows", "with_for_update")
# Write routes that lock a row and are not burst here, each with its reason: none today.
NOT_BURST: dict[tuple[str, str], str] = {}


def _may_lock_a_row(function: Any, seen: set[Any], depth: int = 0) -> bool:
    """Whether ``function``, or an app function it calls (by name, to a few levels), takes a
    row lock: ``lock_row``, ``lock_rows``, ``with_for_update`` or a repository's ``lock=True``."""
    function = inspect.unwrap(function)
    if function in seen or depth > 8 or not callable(function):
        return False
    seen.add(function)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError):
        return False
    names = getattr(function, "__globals__", {})
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "lock" and (
                isinstance(node.value, ast.Constant) and node.value.value is True):
            return True
        if not isinstance(node, ast.Call):
            continue
        called = _resolved(node.func, names)
        if getattr(node.func, "attr", getattr(node.func, "id", None)) in LOCKS:
            return True
        if (called is not None and (getattr(called, "__module__", None) or "").startswith("app.")
                and _may_lock_a_row(called, seen, depth + 1)):
            return True
    return False


def _resolved(expression: ast.expr, names: dict[str, Any]) -> Any:
    if isinstance(expression, ast.Name):
        return names.get(expression.id)
    if isinstance(expression, ast.Attribute):
        owner = _resolved(expression.value, names)
        return getattr(owner, expression.attr, None) if owner is not None else None
    return None


def _write_routes() -> dict[tuple[str, str], Any]:
    found = {}
    for router in API_ROUTERS:
        for route in router.routes:
            assert isinstance(route, APIRoute)
            for method in sorted((route.methods or set()) - {"GET", "HEAD"}):
                found[(method, route.path)] = _unwrapped(route.endpoint)
    return found


def _unwrapped(endpoint: Any) -> Any:
    """The endpoint as written: ``app.http.routing.in_one_hop`` wraps a sync one."""
    inner = inspect.getclosurevars(endpoint).nonlocals.get("function")
    return inner if inner is not None else endpoint


def test_every_write_route_that_locks_a_row_is_burst() -> None:
    routes = _write_routes()
    locking = {key for key, endpoint in routes.items() if _may_lock_a_row(endpoint, set())}
    missing = sorted(locking - set(ROUTES) - set(NOT_BURST))
    assert missing == [], f"write routes that lock a row without a burst here: {missing}"
    assert sorted(set(ROUTES) - set(routes)) == [], "bursts of routes that are gone"
    assert sorted(set(ROUTES) - locking) == [], "bursts of routes that lock no row"


def test_fifty_mappings_of_one_group_make_one(world: World) -> None:
    """A write that locks no row but inserts under a unique key: the losers answer 409."""
    with world.database.transaction() as db:
        t = new_tenancy(db, nodes=0)
    outcome = _burst(world, [Call("POST", f"/api/v1/tenants/{t.slug}/group-mappings",
                                  world.platform, {"group": "ml-team", "role": "member"})] * BURST)
    assert outcome.failures == [] and outcome.peers == []
    assert outcome.statuses == {201: 1, 409: BURST - 1}
