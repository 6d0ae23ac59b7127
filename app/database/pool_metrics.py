"""The connection pool as Prometheus sees it: connections checked out now, by process, and how
long each checkout waited (for a connection another thread gives back, a new connection's
making, or a ping of one idle a while: everything between asking the pool and holding one).

Under ``portal serve --workers N`` each serving process writes its values to the shared folder
(``app.kit.metrics``); the gauge is merged as ``livesum``: the sum over the processes alive,
which is what the database sees, and a process that ended leaves the sum with its connections
(``sum`` would keep a killed process's last count for ever, ``max`` would show one process's,
``all`` would add a ``pid`` label that grows with every restart)."""

from __future__ import annotations

import functools
from time import perf_counter
from typing import Any

from prometheus_client import Gauge, Histogram
from sqlalchemy import Engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import Pool, PoolProxiedConnection

# A free connection is handed over in microseconds; a new one takes a round trip or a few (TLS);
# the waits worth an alert are a pool run dry, up to its timeout (web 5 s, worker 30 s).
WAIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                5.0, 10.0, 30.0)
# The gauge's child a checked-out connection was counted on, kept on its pool entry until it is
# given back (per entry, not per DBAPI connection: one replaced while out keeps the mark).
COUNTED = "portal_counted_in_use"

IN_USE = Gauge(
    "portal_db_pool_connections_in_use", "database connections checked out of the process's "
    "pool now, by process (web, worker)", ["process"], multiprocess_mode="livesum")
CHECKOUT_WAIT = Histogram(
    "portal_db_pool_checkout_wait_seconds", "how long a checkout from the database pool waited "
    "until it held a connection (a checkout that timed out: the whole timeout)",
    buckets=WAIT_BUCKETS)


def timed_pool_class(url: str, engine_kwargs: dict[str, Any]) -> type[Pool] | None:
    """The pool class ``create_engine`` would choose for ``url``, timing each checkout; None
    when the caller gave a pool of its own."""
    if "pool" in engine_kwargs:
        return None
    chosen = engine_kwargs.get("poolclass")
    if chosen is None:
        parsed = make_url(url)
        chosen = parsed.get_dialect().get_pool_class(parsed)  # type: ignore[attr-defined]
    return _timed(chosen)


@functools.cache
def _timed(pool_class: type[Pool]) -> type[Pool]:
    def connect(self: Pool) -> PoolProxiedConnection:
        started = perf_counter()
        try:
            connection = pool_class.connect(self)
        except PoolTimeout:
            CHECKOUT_WAIT.observe(perf_counter() - started)
            raise
        CHECKOUT_WAIT.observe(perf_counter() - started)
        return connection

    # ``recreate`` (``engine.dispose()``) makes its new pool of the same class: still timed.
    return type(f"Timed{pool_class.__name__}", (pool_class,), {"connect": connect})


class CheckoutCount:
    """Counts ``engine``'s connections in use under ``process`` (``web`` until the process
    names it otherwise). Each connection is taken off the count it was put on, should the name
    change while it is out; a checkout that failed before it was counted is given back too."""

    def __init__(self, engine: Engine, process: str = "web") -> None:
        self.process = process
        event.listen(engine, "checkout", self._checked_out)
        event.listen(engine, "checkin", self._given_back)
        event.listen(engine, "detach", self._given_back)

    def _checked_out(self, _dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        counted = IN_USE.labels(self.process)
        record.record_info[COUNTED] = counted
        counted.inc()

    def _given_back(self, _dbapi_connection: Any, record: Any) -> None:
        counted = record.record_info.pop(COUNTED, None) if record is not None else None
        if counted is not None:
            counted.dec()
