"""A circuit breaker per host cluster, shared by every kind in one worker process.

The first reconcile that finds a host gone opens its breaker; until the breaker's backoff ends
(growing with each failed probe) the keys on that host wait instead of each retrying on its
own. The next reconcile after that is the probe: it closes the breaker or opens it longer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

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
        log.warning("host cluster %d: unreachable (%d in a row); backing off until %s",
                    host_id, failures, until.isoformat())
        return until

    def reached(self, host_id: int) -> None:
        with self._lock:
            if self._open.pop(host_id, None) is not None:
                log.info("host cluster %d: reachable again", host_id)
