"""How ``portal serve`` and ``portal dev`` serve HTTP: uvicorn's options and protocol (the app
writes the access line; a busy process sheds connections to its siblings), how many serving
processes, and the application each one runs."""

from __future__ import annotations

import asyncio
import gc
import math
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.kit.config import Settings
from app.kit.metrics import process_ended
from app.process.balance import ConnectionShares, NoShares, shares_from_environment
from app.process.preflight import settings_or_exit

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.types import Lifespan


class AppWritesAccessLine(HttpToolsProtocol):
    """uvicorn's HTTP protocol without uvicorn's access line: the app writes one per answer
    (``app.kit.logs.AccessLog``). Why not ``access_log=False``: uvicorn then also silences the
    ``uvicorn.access`` logger the app writes through (no line at all from one process), and a
    serving process that configures logging after uvicorn did (``--workers N``) turned
    uvicorn's own line back on: two lines per answer, the second through ``logging``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.access_log = False


class BalancedProtocol(AppWritesAccessLine):
    """Closes a connection after its answer while this process has more requests in progress
    than its share of all the serving processes' (``app.process.balance``)."""

    shares: ClassVar[ConnectionShares | NoShares] = NoShares()
    # Connections told to close whose end this process has not seen yet: already gone.
    closing: ClassVar[int] = 0
    shed = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._publish()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.shed:
            self.shed = False
            BalancedProtocol.closing -= 1
        self._publish()

    def on_headers_complete(self) -> None:
        before = self.cycle
        super().on_headers_complete()
        if (self.cycle is not before and not self.shed
                and self.shares.over_share(self._held(), len(self.tasks))):
            self.cycle.keep_alive = False
            self.shed = True
            BalancedProtocol.closing += 1
            self._publish()

    def _held(self) -> int:
        return len(self.connections) - BalancedProtocol.closing

    def _publish(self) -> None:
        self.shares.publish(self._held())


# log_config None: the portal configures logging itself (``configure_logging``).
UVICORN_OPTIONS: dict[str, Any] = {
    "log_config": None, "access_log": True, "http": BalancedProtocol, "proxy_headers": True}


# uvicorn's master kills a serving process that does not answer its ping within this long. A new
# process imports the whole app before it can answer: about 2.5 s on an idle core, over 5 s
# (uvicorn's default) on a busy one, where the default killed each new process in turn for 25 s.
WORKER_HEALTHCHECK_S = 30


def serving_app(settings: Settings | None = None) -> FastAPI:
    """The application one serving process runs (each of ``--workers`` makes its own)."""
    from app.process.asgi import create_app

    if settings is None:
        settings = settings_or_exit()
    app = create_app(settings, serving=True)
    app.router.lifespan_context = _counted_once_started(app.router.lifespan_context)
    settle_heap()
    return app


def _counted_once_started(lifespan: Lifespan[Any]) -> Lifespan[Any]:
    """The process counts among the serving ones (``app.process.balance``) only once it has
    started, right before it accepts. Counted while still starting (seconds on a busy machine),
    it had its busy sibling shed connections that only the sibling could take back."""

    @asynccontextmanager
    async def counted(app: Any) -> AsyncIterator[Any]:
        async with lifespan(app) as state:
            BalancedProtocol.shares = shares_from_environment()
            try:
                yield state
            finally:
                process_ended(os.getpid())

    return counted


def serving_processes(settings: Settings) -> int:
    """One process per CPU it may use: a process runs Python on one core at a time. SQLite
    takes one writer at a time, so there one process."""
    return 1 if settings.is_sqlite else usable_cpus()


def usable_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """The CPUs this process may run on, within its container's CPU limit (cgroup v2
    ``cpu.max``, or v1's CFS quota), rounded up."""
    count = len(os.sched_getaffinity(0))
    limit = _cgroup_cpu_limit(cgroup)
    return max(1, min(count, math.ceil(limit))) if limit else count


def _cgroup_cpu_limit(cgroup: Path) -> float | None:
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        try:
            quota = (cgroup / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (cgroup / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    if quota in ("max", "-1") or not quota.lstrip("-").isdigit() or not period.isdigit():
        return None
    return int(quota) / int(period) if int(period) > 0 else None


# Young objects collected once per this many allocations (CPython's default: 700).
GC_YOUNG_THRESHOLD = 20_000


def settle_heap() -> None:
    """What the process holds once started (modules, mappers, compiled code, ~200,000 objects)
    is moved out of the garbage collector's sight, and young objects are collected less often.

    Why: a full collection walked all of it, 175 ms with every request stalled behind it (a
    p99 of its own), and young collections ran every 700 allocations, about 5 % of a list
    request's CPU; now a collection takes at most a few milliseconds.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 100)

