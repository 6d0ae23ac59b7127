"""Waiting for something a real server does in its own time (a policy taking effect, a call)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# A bound on a hang, not on speed: with two suites on 2 cores, starting a process (portal's
# webhook, `portal dev`) or the controller-manager marking new nodes took over 30 s.
HANG_SECONDS = 120.0


def wait_for(check: Callable[[], T | None], what: str | Callable[[], str],
             timeout: float = HANG_SECONDS, *, every: float = 0.2) -> T:
    """Returns what ``check()`` gives once it is truthy, asking every ``every`` seconds; fails
    naming ``what`` (or what it says, called then: the state it found) after ``timeout``
    seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")
