"""The one thread hop a request's database work takes, on the web process's own worker threads.

Why not anyio's ``to_thread.run_sync`` (what FastAPI uses): per call it looks up its limiter,
enters a cancel scope and hands the work over through a ``queue.Queue``, whose ``Condition``
wakes the worker in Python; with the GIL shared by 8 threads and the event loop, that hand-off
was about a tenth of a signed-in list request's CPU. A ``ThreadPoolExecutor`` hands work over
through a C queue. What anyio guaranteed is kept: the caller's context variables (the request
id in log lines) are those of the thread, and the caller waits for the thread even when it is
cancelled, so that nothing (a rollback) touches the work's session while the thread still does.
Every hop of the web process that uses the database comes here, so the pool sized for these
threads (``app.process.asgi``) bounds them all; FastAPI's own hops (``/healthz``) stay on anyio's.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_THREADS = 3  # PORTAL_WEB_THREADS's default
_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_threads = DEFAULT_THREADS


def set_threads(count: int) -> None:
    """How many threads the next hops use (``PORTAL_WEB_THREADS``)."""
    global _executor, _threads
    with _lock:
        _threads = count
        previous, _executor = _executor, None
    if previous is not None:
        previous.shutdown(wait=False)


def _pool() -> ThreadPoolExecutor:
    global _executor
    executor = _executor
    if executor is None:
        with _lock:
            if _executor is None:
                _executor = ThreadPoolExecutor(_threads, thread_name_prefix="portal-web")
            executor = _executor
    return executor


async def run_sync(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    context = contextvars.copy_context()
    done: Future[T] = _pool().submit(context.run, function, *args, **kwargs)  # type: ignore[arg-type]
    try:
        return await asyncio.wrap_future(done)
    except asyncio.CancelledError:
        await _until_done(done)
        raise


async def _until_done(done: Future[T]) -> None:
    """Waits out the thread (a cancelled wait could not stop it) whatever cancellations follow."""
    while not done.done():
        try:
            await asyncio.wrap_future(done)
        except asyncio.CancelledError:
            continue
        except Exception:
            return
