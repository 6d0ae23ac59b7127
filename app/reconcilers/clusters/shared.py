"""Objects many clusters of a host want (shared queues, the queue guard), applied once while
they stay the same."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime

from app.kube.port import Manifest, ObjectRef

# How long an object shared by many clusters counts as applied.
CACHE_SECONDS = 10.0


class SharedObjects:
    """The last one applied of each, for ``CACHE_SECONDS``, and a lock per object so that
    concurrent reconciles apply it once."""

    def __init__(self, clock: Callable[[], datetime],
                 max_age_seconds: float = CACHE_SECONDS) -> None:
        self.clock = clock
        self.max_age = max_age_seconds
        self._applied: dict[tuple[int, ObjectRef], tuple[Manifest, datetime]] = {}
        self._locks: dict[tuple[int, ObjectRef], threading.Lock] = {}
        self._lock = threading.Lock()

    @contextmanager
    def ensuring(self, host_id: int, ref: ObjectRef) -> Iterator[None]:
        with self._lock:
            lock = self._locks.setdefault((host_id, ref), threading.Lock())
        with lock:
            yield

    def applied(self, host_id: int, ref: ObjectRef, obj: Manifest) -> bool:
        with self._lock:
            found = self._applied.get((host_id, ref))
        return found is not None and found[0] == obj and (
            (self.clock() - found[1]).total_seconds() < self.max_age)

    def remember(self, host_id: int, ref: ObjectRef, obj: Manifest) -> None:
        with self._lock:
            self._applied[(host_id, ref)] = (obj, self.clock())

    def forget(self, host_id: int) -> None:
        with self._lock:
            self._applied = {k: v for k, v in self._applied.items() if k[0] != host_id}
