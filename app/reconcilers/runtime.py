"""The one engine every kind of work runs on.

A worker process claims due (kind, key) items from the database queue with a fenced lease,
reconciles them on a bounded pool of threads while a heartbeat renews their leases, and
schedules each again: at its kind's resync period after a success, sooner when the reconcile
asks, with exponential backoff per key after a transient failure, at the resync period after a
permanent one, when the host's breaker closes for an unreachable host. A reconcile on a host
takes one of the host's slots (half the pool), so a slow host never takes every thread. Any
number of worker processes share the queue; one key is reconciled by one of them at a time.

Level-triggered: every ``resync_seconds`` each kind's keys are seeded into the queue (the ones
it does not know yet are due at once), so an object made without an enqueue is still found, and
every known key is reconciled at least once per period. A service that changes desired state
enqueues the keys it affects (``app.workqueue.enqueue``), and they are due at once.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from app.database.core import Database, utcnow
from app.kit import metrics
from app.kube.retry import RetryPolicy
from app.reconcilers.breaker import HostBreakers, HostSlots
from app.reconcilers.kind import (
    Context,
    Deferred,
    HostUnreachable,
    Kind,
    Outcome,
    RetryLater,
    TerminalError,
)
from app.reconcilers.leases import HeldLeases, Lease, LeaseLost, Ref
from app.workqueue import repository as queue

log = logging.getLogger(__name__)

BACKOFF = RetryPolicy(base_delay=2.0, max_delay=300.0)
# Items one inline pass reconciles at most (``run_pass``).
PASS_LIMIT = 500


def worker_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{threading.get_ident() % 100000}"


@dataclass(frozen=True)
class Result:
    """How one run of an item ended, as the queue records it."""

    next_in: float
    attempts: int
    error: str | None = None
    forget: bool = False
    # Not run: the attempts and the last error stay as they were.
    postponed: bool = False


class Runtime:
    def __init__(self, database: Database, kinds: Sequence[Kind], *,
                 lease_seconds: float = 30.0, concurrency: int = 8,
                 poll_seconds: float = 2.0, clock: Callable[[], datetime] = utcnow,
                 identity: str | None = None) -> None:
        self.database = database
        self.kinds = {kind.name: kind for kind in kinds}
        self.lease = timedelta(seconds=lease_seconds)
        self.poll_seconds = poll_seconds
        self.clock = clock
        self.identity = identity or worker_identity()
        self.hosts = HostBreakers(clock)
        # A Database bound to one connection (a test's rolled-back transaction) serves one
        # thread at a time; SQLite (the embedded default) has one writer: threads would queue.
        self.shared = isinstance(database.sessions.kw.get("bind"), Connection)
        single = self.shared or database.engine.dialect.name == "sqlite"
        self.concurrency = 1 if single else concurrency
        self.slots = HostSlots(max(1, self.concurrency // 2))
        self._gate: AbstractContextManager[Any] = threading.Lock() if self.shared \
            else nullcontext()
        self._seeded: dict[str, float] = {}
        self.stopping = threading.Event()
        self.passes = 0
        # The leases the running pass holds (its heartbeat), while one runs.
        self.held: HeldLeases | None = None

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        with self._gate, self.database.transaction() as db:
            yield db

    # ----- the worker process

    def run(self) -> None:
        """Works until ``stop``; then lets running reconciles finish and ends their leases."""
        log.info("worker %s started with %s", self.identity, sorted(self.kinds) or "nothing")
        self._loop(until_idle=False)
        log.info("worker %s stopped after %d passes", self.identity, self.passes)

    def drain(self) -> None:
        """Works on the pool as ``run`` does, until nothing is due and nothing runs (benches,
        one-shot commands)."""
        for name in self.kinds:
            self.seed(name)
        self._loop(until_idle=True)

    def _loop(self, *, until_idle: bool) -> None:
        with self._heartbeat() as held, ThreadPoolExecutor(
                self.concurrency, thread_name_prefix="reconcile") as pool:
            self.held = held
            running: set[Future[None]] = set()
            while not self.stopping.is_set():
                if not until_idle:
                    self.seed_due()
                free = self.concurrency - len(running)
                claimed = self.claim(free) if free > 0 else []
                running |= {pool.submit(self._run, item, held) for item in claimed}
                self.passes += 1
                metrics.worker_last_pass().set_to_current_time()
                if until_idle and not claimed and not running:
                    break
                if not claimed or free <= len(claimed):
                    running = self._wait(running)
            wait(running)

    def _wait(self, running: set[Future[None]]) -> set[Future[None]]:
        if not running:
            self.stopping.wait(self.poll_seconds)
            return running
        _, pending = wait(running, timeout=self.poll_seconds, return_when=FIRST_COMPLETED)
        return set(pending)

    def stop(self) -> None:
        self.stopping.set()

    # ----- one pass, inline (tests, the one-shot commands)

    def run_pass(self, kinds: Collection[str] | None = None, limit: int = PASS_LIMIT) -> int:
        """Seeds ``kinds`` (all) and reconciles each item of them due now once, one at a time,
        up to ``limit`` items; how many it ran."""
        names = list(kinds or self.kinds)
        for name in names:
            self.seed(name)
        done: set[Ref] = set()
        with self._heartbeat() as held:
            self.held = held
            while len(done) < limit:
                claimed = self.claim(1, names, exclude=done)
                if not claimed:
                    break
                self._run(claimed[0], held)
                done.add((claimed[0].kind, claimed[0].key))
        metrics.worker_last_pass().set_to_current_time()
        return len(done)

    # ----- the queue

    def seed_due(self) -> None:
        now = time.monotonic()
        for name, kind in self.kinds.items():
            if now >= self._seeded.get(name, float("-inf")) + kind.resync_seconds:
                self.seed(name)

    def seed(self, name: str) -> None:
        self._seeded[name] = time.monotonic()
        try:
            with self.transaction() as db:
                queue.seed(db, name, self.kinds[name].keys(db), self.clock())
        except Exception:
            log.exception("listing the keys of %s failed; retrying at its next resync", name)

    def claim(self, limit: int, kinds: Collection[str] | None = None,
              exclude: Collection[Ref] = ()) -> list[queue.Claimed]:
        # Each claim gets its own token: a later claim of the same key, even by this worker,
        # fences off whoever still works on the earlier one.
        token = f"{self.identity[:100]}/{secrets.token_hex(4)}"
        now = self.clock()
        with self.transaction() as db:
            return queue.claim(db, kinds or list(self.kinds), token, now, now + self.lease, limit,
                               exclude)

    def _renew(self, held: dict[Ref, str] | Any) -> set[Ref]:
        with self.transaction() as db:
            return queue.renew(db, held, self.clock() + self.lease)

    def _heartbeat(self) -> HeldLeases:
        # On a test's one shared connection the heartbeat would interleave with the reconcile
        # on that connection: there, leases simply last their full length.
        interval = self.lease.total_seconds() / 3 if not self.shared else None
        return HeldLeases(self._renew, interval, name=f"worker-{os.getpid()}")

    # ----- one item

    def _run(self, item: queue.Claimed, held: HeldLeases) -> None:
        ref = (item.kind, item.key)
        held.add(ref, item.token)
        try:
            result = self._reconcile(item, Lease(item.kind, item.key, item.token, held))
        finally:
            # The heartbeat lets go before the lease ends, so it never mistakes the ended
            # lease for one another worker took.
            held.release(ref)
        if result is None:
            return
        try:
            self._finish(item, result)
        except Exception:
            # The lease runs out and the item is due again: nothing is lost.
            log.exception("%s %s: recording how the reconcile ended failed", *ref)

    def _reconcile(self, item: queue.Claimed, lease: Lease) -> Result | None:
        """Runs the item and counts how it ended (``portal_reconcile_total``) and how long it
        took; a lease lost to another worker is that worker's to count."""
        started = time.perf_counter()
        result, outcome = self._outcome(item, lease)
        if outcome is not None:
            metrics.RECONCILES.labels(item.kind, outcome).inc()
            metrics.RECONCILE_SECONDS.labels(item.kind).observe(time.perf_counter() - started)
        return result

    def _outcome(self, item: queue.Claimed, lease: Lease) -> tuple[Result | None, str | None]:
        kind = self.kinds[item.kind]
        context = Context(lease, self.hosts, self.slots, item.attempts)
        failures = item.attempts + 1
        try:
            outcome = kind.reconcile(item.key, context)
        except LeaseLost:
            log.warning("%s %s: lease lost to another worker; stopping", item.kind, item.key)
            return None, None
        except Deferred as deferred:
            return Result(deferred.delay, item.attempts, postponed=True), "deferred"
        except HostUnreachable as error:
            until = self.hosts.trip(error.host_id)
            wait_for = max((until - self.clock()).total_seconds(), 1.0)
            return Result(wait_for, item.attempts, str(error)), "host_unreachable"
        except RetryLater as error:
            delay = max(error.delay or 0.0, BACKOFF.backoff(min(failures, 20)))
            log.info("%s %s: retrying in %.0fs (attempt %d): %s", item.kind, item.key, delay,
                     failures, error)
            return Result(delay, failures, str(error)), "retry"
        except TerminalError as error:
            log.info("%s %s: failed, looked at again in %.0fs: %s", item.kind, item.key,
                     kind.resync_seconds, error)
            return Result(kind.resync_seconds, failures, str(error)), "terminal"
        except Exception as error:
            # A bug or an error no step expected: one key's failure never stops the others.
            log.exception("%s %s: reconcile failed", item.kind, item.key)
            return Result(BACKOFF.backoff(min(failures, 20)), failures,
                          f"{type(error).__name__}: {error}"), "bug"
        return _success(kind, outcome), "success"

    def _finish(self, item: queue.Claimed, result: Result) -> None:
        now = self.clock()
        with self.transaction() as db:
            if result.forget:
                kept = queue.forget(db, item.kind, item.key, item.token, now)
            elif result.postponed:
                kept = queue.postpone(db, item.kind, item.key, item.token,
                                      next_at=now + timedelta(seconds=result.next_in), now=now)
            else:
                kept = queue.finish(db, item.kind, item.key, item.token,
                                    next_at=now + timedelta(seconds=result.next_in), now=now,
                                    attempts=result.attempts, error=result.error)
        if not kept:
            log.warning("%s %s: lease lost before it ended", item.kind, item.key)


def _success(kind: Kind, outcome: Outcome) -> Result:
    after = outcome.requeue_after if outcome.requeue_after is not None else kind.resync_seconds
    return Result(after, 0, forget=outcome.forget)

