"""How each reconcile ended, counted per kind in ``portal_reconcile_total`` with its duration,
the host breaker's state and the worker's last pass, as the worker's metrics show them."""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

from app.database.core import Database
from app.reconcilers.kind import (
    DONE,
    Context,
    Deferred,
    HostUnreachable,
    Outcome,
    RetryLater,
    TerminalError,
)
from app.reconcilers.runtime import Runtime
from app.workqueue import enqueue
from tests.reconcilers.test_runtime import Clock, Scripted, raising

# The counters are the process's: each test reads how much they moved, under a kind of its own.
OUTCOMES = ("success", "retry", "terminal", "host_unreachable", "deferred", "bug")


@pytest.fixture
def clock() -> Clock:
    return Clock()


def counts(kind: str) -> dict[str, float]:
    return {outcome: REGISTRY.get_sample_value(
        "portal_reconcile_total", {"kind": kind, "outcome": outcome}) or 0.0
        for outcome in OUTCOMES}


def timed(kind: str) -> float:
    return REGISTRY.get_sample_value(
        "portal_reconcile_duration_seconds_count", {"kind": kind}) or 0.0


def moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {outcome: after[outcome] - before[outcome] for outcome in OUTCOMES
            if after[outcome] != before[outcome]}


def run_once(database: Database, kind: Scripted, clock: Clock, *keys: str) -> None:
    with database.transaction() as db:
        for key in keys:
            enqueue(db, kind.name, key, clock())
    Runtime(database, [kind], clock=clock, identity="worker-1").run_pass()


def test_each_way_a_reconcile_ends_is_counted_under_its_kind(
        database: Database, clock: Clock) -> None:
    kind = Scripted(name="metrics-outcomes")
    kind.answers = {"retried": [raising(RetryLater("API server busy"))],
                    "failed": [raising(TerminalError("values refused"))],
                    "unreachable": [raising(HostUnreachable(9001, "connection refused"))],
                    "deferred": [raising(Deferred("host busy", delay=30))],
                    "bug": [raising(KeyError("oops"))]}
    before, before_timed = counts(kind.name), timed(kind.name)

    run_once(database, kind, clock, "fine", "retried", "failed", "unreachable", "deferred",
             "bug")

    assert moved(before, counts(kind.name)) == dict.fromkeys(OUTCOMES, 1)
    assert timed(kind.name) - before_timed == 6


def test_a_retried_key_that_then_succeeds_counts_one_of_each(
        database: Database, clock: Clock) -> None:
    kind = Scripted(name="metrics-retry")
    kind.answers = {"a": [raising(RetryLater("busy")), raising(RetryLater("busy")),
                          lambda _context: DONE]}
    before = counts(kind.name)
    for _ in range(3):
        run_once(database, kind, clock, "a")
        clock.advance(600)
    assert moved(before, counts(kind.name)) == {"retry": 2, "success": 1}


def test_the_breaker_of_an_unreachable_host_shows_open_until_it_answers(
        database: Database, clock: Clock) -> None:
    def answered(context: Context) -> Outcome:
        context.hosts.reached(9002)  # as a reconcile does when the host answers again
        return DONE

    kind = Scripted(name="metrics-breaker")
    kind.answers = {"a": [raising(HostUnreachable(9002, "no route")),
                          answered]}
    runtime = Runtime(database, [kind], clock=clock, identity="worker-1")
    with database.transaction() as db:
        enqueue(db, kind.name, "a", clock())
    runtime.run_pass()
    assert REGISTRY.get_sample_value("portal_host_breaker_open", {"host": "9002"}) == 1
    clock.advance(600)
    runtime.run_pass()
    assert REGISTRY.get_sample_value("portal_host_breaker_open", {"host": "9002"}) == 0


def test_a_pass_stamps_the_workers_last_pass(database: Database, clock: Clock) -> None:
    before = time.time()
    run_once(database, Scripted(name="metrics-pass"), clock)
    stamped = REGISTRY.get_sample_value("portal_worker_last_pass_timestamp_seconds")
    assert stamped is not None
    assert stamped == pytest.approx(time.time(), abs=5) and stamped >= before - 1
