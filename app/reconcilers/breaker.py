"""What the runtime keeps per host cluster, shared by every kind in one worker process.

A circuit breaker: the first reconcile that finds a host gone opens it; until the breaker's
backoff ends (growing with each failed probe) the keys on that host wait instead of each
retrying on its own. The next reconcile after that is the probe: it closes the breaker or opens
it longer.

A share of the pool: a host that answers slowly (or a helm run that hangs) holds at most half
of the worker's threads, so the clusters of the other hosts keep moving.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from app.kit import metrics
from app.kube.retry import RetryPolicy

log = logging.getLogger(__name__)
HOST_BACKOFF = RetryPolicy(base_delay=2.0, max_delay=60.0)


class HostBreakers:
    def __init__(self, clock: Callable[[], datetime]) -> None:
        self.clock = clock
        self._open: dict[int, tuple[datetime, int]] = {}
        self._lock = threading.Lock()

    def open_until(self, host_id: int) -> datetime | None:
        with self._lock:
            found = self._open.get(host_id)
        return found[0] if found is not None and found[0] > self.clock() else None

    def trip(self, host_id: int) -> datetime:
        with self._lock:
            _, failures = self._open.get(host_id, (self.clock(), 0))
            failures += 1
            until = self.clock() + timedelta(seconds=HOST_BACKOFF.backoff(min(failures, 20)))
            self._open[host_id] = (until, failures)
        metrics.BREAKER_OPEN.labels(str(host_id)).set(1)
        log.warning("host cluster %d: unreachable (%d in a row); backing off until %s",
                    host_id, failures, until.isoformat())
        return until

    def reached(self, host_id: int) -> None:
        with self._lock:
            if self._open.pop(host_id, None) is not None:
                log.info("host cluster %d: reachable again", host_id)
                metrics.BREAKER_OPEN.labels(str(host_id)).set(0)


class HostSlots:
    """How many reconciles may work on one host at once."""

    def __init__(self, per_host: int) -> None:
        self.per_host = per_host
        self._busy: dict[int, int] = {}
        self._lock = threading.Lock()

    @contextmanager
    def hold(self, host_id: int) -> Iterator[bool]:
        """A slot on the host for the block; False (and nothing held) when all are taken."""
        with self._lock:
            taken = self._busy.get(host_id, 0) < self.per_host
            if taken:
                self._busy[host_id] = self._busy.get(host_id, 0) + 1
        try:
            yield taken
        finally:
            if taken:
                with self._lock:
                    self._busy[host_id] -= 1
