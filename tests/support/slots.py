"""Machine-wide slots for what cannot be named per process: the lab's bridge and subnet, a
port a program always binds.

A network namespace, a bridge and a subnet are the machine's, not a test worker's: two suites
at once (or two workers) each claim a free slot and hold it with a file lock for as long as
they use it. A slot whose holder crashed is free again, and the lab takes down what was left.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SLOTS = 8
FOLDER = Path(tempfile.gettempdir()) / "gtp-slots"


class NoFreeSlot(RuntimeError):
    pass


@contextmanager
def claimed(kind: str) -> Iterator[int]:
    """The first free slot of ``kind``, held until the block ends."""
    for slot in range(SLOTS):
        descriptor = _locked(f"{kind}-{slot}")
        if descriptor is None:
            continue
        try:
            yield slot
        finally:
            os.close(descriptor)
        return
    raise NoFreeSlot(f"all {SLOTS} {kind} slots are taken (in {FOLDER})")


@contextmanager
def exclusive(name: str, timeout: float) -> Iterator[None]:
    """The machine's only ``name`` (a fixed port a program always binds), held until the block
    ends; waits at most ``timeout`` seconds for another holder."""
    deadline = time.monotonic() + timeout
    while (descriptor := _locked(name)) is None:
        if time.monotonic() > deadline:
            raise NoFreeSlot(f"{name} stayed taken for {timeout:.0f} s "
                             f"(held through {FOLDER / name}.lock)")
        time.sleep(0.5)
    try:
        yield
    finally:
        os.close(descriptor)


def _locked(name: str) -> int | None:
    """A descriptor holding ``name``'s lock, or None while another holds it."""
    FOLDER.mkdir(mode=0o700, exist_ok=True)
    descriptor = os.open(FOLDER / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    return descriptor
