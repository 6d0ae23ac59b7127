"""Keep-alive connections spread evenly over `portal serve`'s processes.

Why: the processes share one listening socket, and the first to wake takes every connection
waiting (the event loop accepts in a loop). A client that opens its connections at once (a
proxy's pool, a load balancer, the bench's 32 clients) put 28 of 32 on one process: that
process queued seven times the other's work, and the p99 of the page measured doubled (550 ms
against 230 ms). Node's cluster module hands connections out from its master for the same
reason; uvicorn's master does not accept.

Instead each process publishes how many connections it holds in a small shared file. A busy
process (a few requests in progress) that holds more than its share answers with
``Connection: close``: the client reconnects, and the sibling waiting in accept, less busy, is
the likelier to take the new connection. Only a busy one sheds: idle connections cost nothing,
and a client that reconnects only when it next asks would leave a process that shed them
holding fewer and fewer (those not yet back count nowhere).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import mmap
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("portal")

# How the master tells its serving processes where the shared file is (they inherit it).
SHARES_ENV = "PORTAL_SERVE_CONNECTION_SHARES"
SLOTS = 64
# The file: the number of slots ever claimed, then per slot its process id and connections.
_CELLS = 1 + 2 * SLOTS
_CELL_BYTES = 8
# A process may hold this many connections over an even share before it sheds one.
SLACK = 1
# Requests in progress from which a process counts as busy. Two are not: the request a client
# sends right after its answer may arrive before the answered one's task has ended.
BUSY = 3


@contextlib.contextmanager
def connection_shares() -> Iterator[None]:
    """For a master about to start its serving processes: the shared file they will find in
    their environment, removed when they are done. Without a place to write it, they serve
    unbalanced."""
    try:
        path = create_shares_file()
    except OSError as error:
        log.warning("serving processes will not balance their connections: %s", error)
        yield
        return
    os.environ[SHARES_ENV] = str(path)
    try:
        yield
    finally:
        os.environ.pop(SHARES_ENV, None)
        path.unlink(missing_ok=True)


def create_shares_file() -> Path:
    """A zeroed file for one master's processes, in shared memory where the system has it."""
    folder = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()  # noqa: S108 - a private mkstemp file
    descriptor, name = tempfile.mkstemp(prefix="portal-serve-", suffix=".shares", dir=folder)
    try:
        os.ftruncate(descriptor, _CELLS * _CELL_BYTES)
    finally:
        os.close(descriptor)
    return Path(name)


class NoFreeSlot(Exception):
    pass


class ConnectionShares:
    """One serving process's slot in the shared file, and the others' figures beside it."""

    def __init__(self, path: Path) -> None:
        with path.open("r+b") as file:
            self._map = mmap.mmap(file.fileno(), _CELLS * _CELL_BYTES)
            self._cells = memoryview(self._map).cast("q")
            self._slot = self._claim(file.fileno())

    def _claim(self, descriptor: int) -> int:
        """The first slot that is free or whose process has gone (uvicorn's master replaces a
        dead serving process: its successor takes its place)."""
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        try:
            cells = self._cells
            for slot in range(SLOTS):
                if not _alive(cells[1 + 2 * slot]):
                    cells[1 + 2 * slot] = os.getpid()
                    cells[2 + 2 * slot] = 0
                    cells[0] = max(cells[0], slot + 1)
                    return slot
        finally:
            fcntl.flock(descriptor, fcntl.LOCK_UN)
        raise NoFreeSlot(f"more than {SLOTS} serving processes share one listening socket")

    def publish(self, connections: int) -> None:
        self._cells[2 + 2 * self._slot] = connections

    def over_share(self, connections: int, in_progress: int) -> bool:
        """Whether this process is busy and holds more connections than an even share."""
        if in_progress < BUSY:
            return False
        cells = self._cells
        processes = total = 0
        for slot in range(cells[0]):
            if cells[1 + 2 * slot]:
                processes += 1
                total += cells[2 + 2 * slot]
        return processes > 1 and connections > -(-total // processes) + SLACK


class NoShares:
    """A single serving process: nothing to balance."""

    def publish(self, connections: int) -> None:
        pass

    def over_share(self, connections: int, in_progress: int) -> bool:
        return False


def counted_processes(path: Path) -> set[int]:
    """The live processes a master's shared file counts: those serving."""
    cells = memoryview(path.read_bytes()).cast("q")
    return {pid for slot in range(cells[0]) if _alive(pid := cells[1 + 2 * slot])}


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def shares_from_environment() -> ConnectionShares | NoShares:
    """This serving process's shares, when its master made a file for them."""
    path = os.environ.get(SHARES_ENV)
    if not path:
        return NoShares()
    with contextlib.suppress(OSError, NoFreeSlot):
        return ConnectionShares(Path(path))
    return NoShares()
