"""Client-side throttling and retry timing for the Kubernetes adapter."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


class TokenBucket:
    """Client-side rate limit like client-go's: ``burst`` calls at once, then ``qps`` per second.

    Thread-safe: reconcilers of several kinds may share one adapter.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be > 0 and burst >= 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._updated = clock()
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            wait = self._reserve()
        if wait > 0:
            self._sleep(wait)

    def _reserve(self) -> float:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.qps)
        self._updated = now
        self._tokens -= 1
        # A negative balance is a debt: the caller sleeps it off outside the lock.
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter, capped; ``attempts`` counts the first try."""

    attempts: int = 5
    base_delay: float = 0.2
    max_delay: float = 10.0

    def backoff(self, attempt: int) -> float:
        """Delay before retry number ``attempt`` (1-based)."""
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)  # noqa: S311 - jitter, not crypto


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header; HTTP dates are not used by kube-apiserver."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
