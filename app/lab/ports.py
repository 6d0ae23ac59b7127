"""Free TCP ports for the programs the lab and the tests start, handed to one process at a time.

Why not the kernel's ``bind(port 0)``: the port is free when asked and taken later, when the
program starts; in between, the kernel hands the same number to the next ``bind(0)`` of any
process, or to an outgoing connection's local end, both drawn from the ephemeral range. On a
machine running a suite's workers, its labs and Prometheus, that happened: a test's portal was
answered by another process's server. So the ports come from below the ephemeral range, where
the kernel hands out nothing by itself, and each is reserved for its process by a lock on a
file named after it, which every process of the machine (a second suite too) respects.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

FLOOR = 20_000
# A process keeps its newest reservations; an older port has long been bound by its program
# (or given up), and a bound port fails the next process's own check.
KEPT = 512
# Per user: a folder root made (`sudo make lab`) would not let another user lock in it.
RESERVATIONS = Path(tempfile.gettempdir()) / f"gpu-tenant-portal-ports-{os.getuid()}"
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")

_lock = threading.Lock()
_held: OrderedDict[int, int] = OrderedDict()  # port -> descriptor of its locked file
_cursor: list[int] = []


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at ``host``, reserved for this process."""
    low, high = candidate_range()
    with _lock:
        if not _cursor:
            _cursor.append(random.randrange(low, high))  # noqa: S311 - a spread, not a secret
        for _ in range(high - low):
            port = _cursor[0]
            _cursor[0] = low + (port + 1 - low) % (high - low)
            if port not in _held and _reserve(port):
                if _bindable(host, port):
                    return port
                _release(port)
    raise RuntimeError(f"no free port between {low} and {high} (see {RESERVATIONS})")


def candidate_range() -> tuple[int, int]:
    """``[low, high)``: from ``FLOOR`` to the start of the ephemeral range; above it when a
    machine's ephemeral range leaves too little below."""
    try:
        first, last = (int(word) for word in EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        first, last = 32_768, 60_999
    if first - FLOOR >= 4_096:
        return FLOOR, first
    return last + 1, 65_536


def _reserve(port: int) -> bool:
    RESERVATIONS.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor = os.open(RESERVATIONS / str(port), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        return False
    _held[port] = descriptor
    while len(_held) > KEPT:
        _release(next(iter(_held)))
    return True


def _release(port: int) -> None:
    os.close(_held.pop(port))


def _bindable(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True
