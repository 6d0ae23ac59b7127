"""Signals between the portal's processes through PostgreSQL's LISTEN/NOTIFY.

A ``NOTIFY`` sent inside a transaction reaches the listeners when (and only if) it commits, so a
listener hears of a change no sooner than it can read it.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable

import psycopg
from sqlalchemy import Engine
from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

_CHANNEL = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_SENT = "notify.sent"
# How long a listener waits for a signal before checking whether it should stop.
POLL_SECONDS = 0.5
# A lost listening connection is made again after this long.
RECONNECT_SECONDS = 1.0


def is_postgresql(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


def announce(session: Session, channel: str) -> None:
    """Every process listening on ``channel`` hears once this session's transaction commits;
    nothing when it rolls back. Sent once per transaction; a no-op off PostgreSQL."""
    sent: set[str] = session.info.setdefault(_SENT, set())
    if channel in sent:
        return
    connection = session.connection()
    if connection.dialect.name != "postgresql":
        return
    connection.exec_driver_sql(f"NOTIFY {_checked(channel)}")
    sent.add(channel)


def transaction_ended(session: Session) -> None:
    """The next transaction of ``session`` announces again."""
    session.info.pop(_SENT, None)


def _checked(channel: str) -> str:
    if not _CHANNEL.match(channel):
        raise ValueError(f"not a channel name: {channel!r}")
    return channel


class Listener:
    """A thread that calls ``on_signal`` for each signal on ``channel``, and also whenever it
    (re)connects: what was announced while it was not listening is then unknown."""

    def __init__(self, engine: Engine, channel: str, on_signal: Callable[[], None]) -> None:
        self.conninfo = engine.url.set(drivername="postgresql").render_as_string(
            hide_password=False)
        self.channel = _checked(channel)
        self.on_signal = on_signal
        self.listening = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"listen-{channel}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """The thread ends within ``POLL_SECONDS``; not waited for."""
        self._stopping.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._listen()
            except psycopg.Error as error:
                log.warning("not listening for %s (%s); retrying in %.0f s", self.channel,
                            type(error).__name__, RECONNECT_SECONDS)
            self.listening.clear()
            self.on_signal()
            self._stopping.wait(RECONNECT_SECONDS)

    def _listen(self) -> None:
        with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5) as connection:
            connection.execute(f"LISTEN {self.channel}")
            self.on_signal()
            self.listening.set()
            while not self._stopping.is_set():
                for _signal in connection.notifies(timeout=POLL_SECONDS):
                    self.on_signal()
