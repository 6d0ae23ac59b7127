"""The runtime every kind runs on: the schedule after each way a reconcile ends, the queue a
service's change goes through, the host breaker, and two worker processes sharing the work
without ever holding one key at once."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from app.database.core import Database, utcnow
from app.reconcilers.kind import (
    DONE,
    GONE,
    Context,
    Deferred,
    HostUnreachable,
    Outcome,
    RetryLater,
    TerminalError,
)
from app.reconcilers.runtime import Runtime
from app.workqueue import enqueue
from app.workqueue import repository as queue
from app.workqueue.models import WorkItem
from tests.support.paths import ROOT

RESYNC = 300.0


class Clock:
    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class Scripted:
    """A kind whose reconciles answer what the test lines up, per key."""

    keys_listed: list[str] = field(default_factory=list)
    answers: dict[str, list[Callable[[Context], Outcome]]] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)
    name: str = "scripted"
    resync_seconds: float = RESYNC

    def keys(self, db: Session) -> list[str]:
        return list(self.keys_listed)

    def reconcile(self, key: str, context: Context) -> Outcome:
        self.seen.append(key)
        lined_up = self.answers.get(key) or [lambda _context: DONE]
        return lined_up.pop(0)(context) if len(lined_up) > 1 else lined_up[0](context)


def raising(error: Exception) -> Callable[[Context], Outcome]:
    def answer(_context: Context) -> Outcome:
        raise error
    return answer


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def kind() -> Scripted:
    return Scripted()


@pytest.fixture
def runtime(database: Database, kind: Scripted, clock: Clock) -> Runtime:
    return Runtime(database, [kind], clock=clock, identity="worker-1")


def item(database: Database, key: str, kind: str = "scripted") -> WorkItem:
    with database.session() as db:
        found = db.get(WorkItem, (kind, key))
    assert found is not None, f"{kind} {key} is not queued"
    return found


def due_in(database: Database, clock: Clock, key: str) -> float:
    return (item(database, key).due_at - clock()).total_seconds()


def enqueue_now(database: Database, clock: Clock, key: str) -> None:
    with database.transaction() as db:
        enqueue(db, "scripted", key, clock())


def test_an_enqueued_key_is_reconciled_at_once_then_at_the_resync(
    database: Database, runtime: Runtime, kind: Scripted, clock: Clock
) -> None:
    enqueue_now(database, clock, "a")
    assert runtime.run_pass() == 1 and kind.seen == ["a"]
    assert runtime.run_pass() == 0  # converged: nothing due until the resync
    assert due_in(database, clock, "a") == pytest.approx(RESYNC)
    clock.advance(RESYNC)
    assert runtime.run_pass() == 1


def test_the_keys_a_kind_lists_are_seeded_and_known_ones_keep_their_schedule(
    database: Database, runtime: Runtime, kind: Scripted, clock: Clock
) -> None:
    kind.keys_listed = ["a", "b"]
    assert runtime.run_pass() == 2
    kind.keys_listed = ["a", "b", "c"]  # made without an enqueue: the next seeding finds it
    assert runtime.run_pass() == 1 and kind.seen == ["a", "b", "c"]
    assert due_in(database, clock, "a") == pytest.approx(RESYNC)


def test_a_key_enqueued_while_held_is_due_again_as_soon_as_it_finishes(
    database: Database, runtime: Runtime, kind: Scripted, clock: Clock
) -> None:
    def changed_meanwhile(_context: Context) -> Outcome:
        enqueue_now(database, clock, "a")  # a service commits a change mid-reconcile
        return DONE

    kind.answers["a"] = [changed_meanwhile, lambda _context: DONE]
    enqueue_now(database, clock, "a")
    assert runtime.run_pass() == 1  # a pass looks at each key once
    assert due_in(database, clock, "a") == 0
    assert runtime.run_pass() == 1
    assert kind.seen == ["a", "a"]
    assert due_in(database, clock, "a") == pytest.approx(RESYNC)


def test_requeue_after_and_forget(
    database: Database, runtime: Runtime, kind: Scripted, clock: Clock
) -> None:
    kind.answers = {"soon": [lambda _context: Outcome(requeue_after=5.0)],
                    "gone": [lambda _context: GONE]}
    enqueue_now(database, clock, "soon")
    enqueue_now(database, clock, "gone")
    assert runtime.run_pass() == 2
    assert due_in(database, clock, "soon") == pytest.approx(5.0)
    with database.session() as db:
        assert [i.key for i in queue.items(db, "scripted")] == ["soon"]


def test_transient_failures_back_off_per_key_honouring_the_servers_delay(
    database: Database, runtime: Runtime, kind: Scripted, clock: Clock
) -> None:
    kind.answers["a"] = [raising(RetryLater("busy")), raising(RetryLater("busy")),
                         raising(RetryLater("slow down", delay=45.0)), lambda _context: DONE]
    enqueue_now(database, clock, "a")
    delays = []
    for _ in range(3):
        assert runtime.run_pass() == 1
        delays.append(due_in(database, clock, "a"))
        clock.advance(delays[-1])
    assert 1.0 <= delays[0] <= 2.0 and 2.0 <= delays[1] <= 4.0 and delays[2] >= 45.0
    failed = item(database, "a")
    assert (failed.attempts, failed.last_error) == (3, "slow down")
    assert runtime.run_pass() == 1
    recovered = item(database, "a")
    assert (recovered.attempts, recovered.last_error) == (0, None)


def test_a_permanent_failure_waits_for_the_resync_and_a_bug_backs_off(
    database: Database, runtime: Runtime, kind: Scripted, clock: Clock
) -> None:
    kind.answers = {"bad": [raising(TerminalError("InvalidSpec: no such class"))],
                    "bug": [raising(ZeroDivisionError("division by zero"))]}
    enqueue_now(database, clock, "bad")
    enqueue_now(database, clock, "bug")
    assert runtime.run_pass() == 2
    assert due_in(database, clock, "bad") == pytest.approx(RESYNC)
    assert item(database, "bad").last_error == "InvalidSpec: no such class"
    assert due_in(database, clock, "bug") <= 2.0
    assert item(database, "bug").last_error == "ZeroDivisionError: division by zero"


def test_an_unreachable_host_opens_its_breaker_for_every_key_on_it(
    database: Database, runtime: Runtime, kind: Scripted, clock: Clock
) -> None:
    probes: list[datetime | None] = []

    def on_host_7(context: Context) -> Outcome:
        until = context.hosts.open_until(7)
        probes.append(until)
        if until is not None:  # the breaker is open: no call to the host
            return Outcome(requeue_after=(until - clock()).total_seconds())
        raise HostUnreachable(7, "connection refused")

    kind.answers = {"a": [on_host_7], "b": [on_host_7]}
    enqueue_now(database, clock, "a")
    assert runtime.run_pass() == 1
    assert runtime.hosts.open_until(7) is not None
    assert 1.0 <= due_in(database, clock, "a") <= 2.0
    assert item(database, "a").attempts == 0  # the host's failure, not the key's
    enqueue_now(database, clock, "b")
    assert runtime.run_pass() == 1
    assert probes[0] is None and probes[1] == runtime.hosts.open_until(7)


def test_a_deferred_key_comes_back_soon_with_its_failures_as_they_were(
    database: Database, runtime: Runtime, kind: Scripted, clock: Clock
) -> None:
    kind.answers["a"] = [raising(RetryLater("busy")),
                         raising(Deferred("its host has its share busy", delay=1.0)),
                         lambda _context: DONE]
    enqueue_now(database, clock, "a")
    assert runtime.run_pass() == 1
    clock.advance(due_in(database, clock, "a"))
    assert runtime.run_pass() == 1
    assert due_in(database, clock, "a") == pytest.approx(1.0)
    deferred = item(database, "a")
    assert (deferred.attempts, deferred.last_error) == (1, "busy")


# ----- several worker processes


def start_worker(url: str, log: Path, keys: int) -> subprocess.Popen[str]:
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.support.probe_worker", url, str(log), str(keys)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert worker.stdout is not None and worker.stdout.readline().strip() == "started"
    return worker


@pytest.fixture
def two_workers(own_pg_database: Database, tmp_path: Path) -> Iterator[tuple[Path, list[
        subprocess.Popen[str]]]]:
    log = tmp_path / "reconciles.log"
    workers = [start_worker(own_pg_database.url, log, 12) for _ in range(2)]
    yield log, workers
    for worker in workers:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_two_worker_processes_share_the_keys_and_never_hold_one_at_once(
    own_pg_database: Database, two_workers: tuple[Path, list[subprocess.Popen[str]]]
) -> None:
    log, workers = two_workers
    time.sleep(6)
    for worker in workers:
        worker.terminate()  # SIGTERM: running reconciles finish, leases end
    assert [worker.wait(30) for worker in workers] == [0, 0]

    runs: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for line in log.read_text().splitlines():
        key, pid, started, ended = line.split()
        runs[key].append((int(started), int(ended), int(pid)))
    assert sorted(runs, key=int) == [str(k) for k in range(12)]
    pids = {pid for spans in runs.values() for _, _, pid in spans}
    assert pids == {worker.pid for worker in workers}  # both did work
    for key, spans in runs.items():
        spans.sort()
        overlaps = [(a, b) for a, b in pairwise(spans) if b[0] < a[1]]
        assert overlaps == [], f"key {key} was reconciled twice at once"
    with own_pg_database.session() as db:
        held = [i.key for i in queue.items(db, "probe") if i.lease_owner is not None]
    assert held == []  # a graceful stop leaves no lease behind
