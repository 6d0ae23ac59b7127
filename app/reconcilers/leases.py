"""Short leases on work items, kept alive by a heartbeat while their holder works on them.

The runtime claims items with a short lease (``PORTAL_WORKER_LEASE_SECONDS``) and registers
each claim here with its token. While a reconcile runs, even through a step that takes longer
than the lease (``helm upgrade --install``), a background thread renews every registered lease
at a third of the lease. If the process dies, renewals stop and another worker adopts the items
once the lease runs out, not after the longest step could take.

Renewal is fenced: ``renew`` stretches only the leases still held under their token and reports
the others lost. A reconcile asks ``Lease.lost()`` before each external write and stops; its
own database writes are fenced on the same token (``Lease.holds(db)``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType

from sqlalchemy.orm import Session

from app.workqueue import repository as queue

log = logging.getLogger(__name__)

Ref = queue.Ref
# {ref: token} of the leases to renew -> the refs still held.
Renew = Callable[[Mapping[Ref, str]], set[Ref]]


class LeaseLost(Exception):
    """Another worker holds the item now; this one stops touching it."""


class HeldLeases:
    """The leases one worker holds; a context manager that runs their heartbeat from the first
    lease added until it exits (an idle worker starts no thread)."""

    def __init__(self, renew: Renew, interval_seconds: float | None, *,
                 name: str = "leases") -> None:
        self._renew = renew
        self.interval = interval_seconds
        # None: no heartbeat; the leases last their full length.
        self.beats = interval_seconds is not None
        self._held: dict[Ref, str] = {}
        self._lost: set[Ref] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"{name}-heartbeat", daemon=True)

    def add(self, ref: Ref, token: str) -> None:
        with self._lock:
            self._held[ref] = token
            self._lost.discard(ref)
            if self._thread.ident is None and not self._stop.is_set() and self.beats:
                self._thread.start()

    def release(self, ref: Ref) -> None:
        """Stop renewing ``ref`` (its holder ends the lease, or gave up on it)."""
        with self._lock:
            self._held.pop(ref, None)

    def lost(self, ref: Ref) -> bool:
        with self._lock:
            return ref in self._lost

    def renew_now(self) -> None:
        """One heartbeat. A renewal that fails (the database is unreachable) marks nothing
        lost: the leases may run out meanwhile, and the fenced writes then refuse."""
        with self._lock:
            held = dict(self._held)
        if not held:
            return
        try:
            kept = self._renew(held)
        except Exception:
            log.exception("renewing %d leases failed; retrying in %.0fs", len(held),
                          self.interval or 0)
            return
        with self._lock:
            for ref, token in held.items():
                if ref not in kept and self._held.get(ref) == token:
                    log.warning("lease on %s %s was taken by another worker", *ref)
                    self._held.pop(ref)
                    self._lost.add(ref)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval or 0):
            self.renew_now()

    def __enter__(self) -> HeldLeases:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        with self._lock:
            self._stop.set()
        if self._thread.ident is not None:
            self._thread.join()


@dataclass(frozen=True)
class Lease:
    """One held item, as its reconcile sees it."""

    kind: str
    key: str
    token: str
    held: HeldLeases

    def lost(self) -> bool:
        return self.held.lost((self.kind, self.key))

    def check(self) -> None:
        """Before a write to a host: stop if another worker has taken the item."""
        if self.lost():
            raise LeaseLost

    def holds(self, db: Session) -> bool:
        """Whether this lease still holds the item, locking it for ``db``'s transaction."""
        return queue.holds(db, self.kind, self.key, self.token)

    def fence(self, db: Session) -> None:
        """Raises LeaseLost unless this lease still holds the item (see ``holds``)."""
        if not self.holds(db):
            raise LeaseLost
