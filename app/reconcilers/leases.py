"""Short leases, kept alive by a heartbeat while their holder works on them.

A reconciler claims objects with a short lease (``PORTAL_WORKER_LEASE_SECONDS``) and registers
each claim here with its token. While it works, even through a step that takes longer than the
lease (``helm upgrade --install``), a background thread renews every registered lease at a
third of the lease. If the process dies, renewals stop and another worker adopts the objects
once the lease runs out, not after the longest step could take.

Renewal is fenced: ``renew`` stretches only the leases still held under their token and reports
the others lost. The holder asks ``lost(key)`` before each external write and stops; its own
database writes are fenced on the same token.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from types import TracebackType

log = logging.getLogger(__name__)

# {key: token} of the leases to renew -> the keys still held.
Renew = Callable[[Mapping[int, str]], set[int]]


class HeldLeases:
    """The leases one reconciler pass holds; a context manager that runs their heartbeat from
    the first lease added until it exits (an idle pass starts no thread)."""

    def __init__(self, renew: Renew, interval_seconds: float, *, name: str = "leases") -> None:
        self._renew = renew
        self.interval = interval_seconds
        self._held: dict[int, str] = {}
        self._lost: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"{name}-heartbeat", daemon=True)

    def add(self, key: int, token: str) -> None:
        with self._lock:
            self._held[key] = token
            self._lost.discard(key)
            if self._thread.ident is None and not self._stop.is_set():
                self._thread.start()

    def release(self, key: int) -> None:
        """Stop renewing ``key`` (its holder ended the lease, or gave up on it)."""
        with self._lock:
            self._held.pop(key, None)

    def lost(self, key: int) -> bool:
        with self._lock:
            return key in self._lost

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
                          self.interval)
            return
        with self._lock:
            for key, token in held.items():
                if key not in kept and self._held.get(key) == token:
                    log.warning("lease on %d was taken by another worker", key)
                    self._held.pop(key)
                    self._lost.add(key)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            self.renew_now()

    def __enter__(self) -> HeldLeases:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        with self._lock:
            self._stop.set()
        if self._thread.ident is not None:
            self._thread.join()
