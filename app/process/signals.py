"""SIGTERM and Ctrl-C for the commands that run until stopped (``portal worker``, ``webhook``,
``lab``, ``dev-idp``): the stop they ask for, called from a thread of its own."""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("portal")


def stop_on_signals(stop: Callable[[], None]) -> None:
    """SIGTERM and Ctrl-C call ``stop`` from a thread of their own, which the signal wakes
    through a socket. Not from a Python handler: that runs in the main thread between two of
    its steps, and ``stop`` sets an Event whose lock the main thread may hold right then
    (inside ``Event.wait``): the process hung (``portalctl audit --follow`` did on Ctrl-C)."""
    woken, waking = socket.socketpair()
    waking.setblocking(False)
    signal.set_wakeup_fd(waking.fileno(), warn_on_full_buffer=False)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _noted_only)

    def relay() -> None:
        with woken, waking:  # open as long as the relay runs (closed, signals go nowhere)
            while received := woken.recv(16):
                for signum in received:
                    log.info("received %s, stopping", signal.Signals(signum).name)
                    stop()

    threading.Thread(target=relay, name="signals", daemon=True).start()


def _noted_only(_signum: int, _frame: FrameType | None) -> None:
    """Python's part of a signal: nothing (the wakeup socket carries it to ``relay``)."""
