"""What a kind of work gives the runtime, and what a reconcile answers.

A kind lists its keys (the level-triggered resync reconciles every one of them each period)
and reconciles one key at a time. It owns its steps only: the runtime owns the queue, the
lease and its heartbeat, the backoff, the host breakers, the pool and the schedule.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.orm import Session

from app.reconcilers.breaker import HostBreakers, HostSlots
from app.reconcilers.leases import Lease


@dataclass(frozen=True)
class Outcome:
    """A reconcile that succeeded: when to look again (None: at the kind's resync period),
    or that the key's object is gone and the queue may forget it."""

    requeue_after: float | None = None
    forget: bool = False


DONE = Outcome()
GONE = Outcome(forget=True)


class RetryLater(Exception):
    """Transient: the runtime retries the key with exponential backoff per key, never sooner
    than ``delay`` (the server's Retry-After) when one is given."""

    def __init__(self, message: str, *, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class HostUnreachable(RetryLater):
    """The key's host does not answer: its breaker opens, and every key on it waits."""

    def __init__(self, host_id: int, message: str) -> None:
        super().__init__(message)
        self.host_id = host_id


class Deferred(Exception):
    """Not run now (the host has its share of the pool busy): looked at again after ``delay``
    seconds, its failures in a row and last error as they were."""

    def __init__(self, message: str, *, delay: float) -> None:
        super().__init__(message)
        self.delay = delay


class TerminalError(Exception):
    """Permanent until someone changes something: the key is looked at again at its kind's
    resync period (an operator may have fixed the cause), not sooner."""


@dataclass(frozen=True)
class Context:
    """What a reconcile may ask of the runtime: its lease, the host breakers and the hosts'
    shares of the pool."""

    lease: Lease
    hosts: HostBreakers
    slots: HostSlots
    # Failures of this key in a row before this run.
    attempts: int = 0


class Kind(Protocol):
    name: str

    @property
    def resync_seconds(self) -> float:
        """How often every key is reconciled at the least."""
        ...

    def keys(self, db: Session) -> Iterable[str]:
        """Every key that should be reconciled now and then."""
        ...

    def reconcile(self, key: str, context: Context) -> Outcome:
        ...
