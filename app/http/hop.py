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

A transaction never waits for one of these threads: a request's work ends its transaction in the
hop that began it (``app.http.routing``). What may still end one later (a session a response's
serialisation read through) goes to ``release``, a lane of its own: on the shared threads it
queued behind the very requests that waited for its row locks, each holding a thread, and
nothing moved again (issue 53). Each job there ends the transaction of a connection it already
holds, and the lane has a thread for every connection the pool may hand out, so it never queues.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_THREADS = 3  # PORTAL_WEB_THREADS's default
_lock = threading.Lock()
_executors: dict[str, ThreadPoolExecutor] = {}
_threads = {"portal-web": DEFAULT_THREADS, "portal-release": DEFAULT_THREADS}
# Which app's threads these are: an app that stops after another one started (two in one
# process: the tests' served portals, one winding down while the next serves) must not drop
# the newer one's work.
_generation = [0]


def set_threads(count: int, connections: int | None = None) -> int:
    """How many threads the next hops use (``PORTAL_WEB_THREADS``), and ``release`` (one for
    each of the ``connections`` the pool may hand out; default ``count``); returns the
    generation to give ``stop``."""
    with _lock:
        _threads.update({"portal-web": count, "portal-release": connections or count})
        previous = list(_executors.values())
        _executors.clear()
        _generation[0] += 1
        generation = _generation[0]
    for executor in previous:
        executor.shutdown(wait=False)
    return generation


def stop(generation: int | None = None) -> None:
    """Drops the work no thread has started (a stopping process answers nobody any more);
    what runs finishes, bounded by the database's own timeouts. Given the ``generation`` its
    app's ``set_threads`` returned, nothing is dropped once another app has set its own."""
    with _lock:
        if generation is not None and generation != _generation[0]:
            return
        previous = list(_executors.values())
        _executors.clear()
    for executor in previous:
        executor.shutdown(wait=False, cancel_futures=True)


def _pool(name: str) -> ThreadPoolExecutor:
    executor = _executors.get(name)
    if executor is None:
        with _lock:
            executor = _executors.get(name)
            if executor is None:
                executor = _executors[name] = ThreadPoolExecutor(_threads[name],
                                                                 thread_name_prefix=name)
    return executor


async def run_sync(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    return await _run_on("portal-web", function, *args, **kwargs)


async def run_as(key: Hashable | None, function: Callable[P, T], *args: P.args,
                 **kwargs: P.kwargs) -> T:
    """``run_sync`` for work of ``key`` (one tenant's writes, say), which holds every thread but
    one at most: whatever that work waits for (a row another of its requests holds, up to the
    lock timeout each), the others' requests always find a thread."""
    limit = _threads["portal-web"] - 1
    if key is None or limit < 1:
        return await run_sync(function, *args, **kwargs)
    shared = (asyncio.get_running_loop(), key)
    share = _shares.get(shared)
    if share is None:
        share = _shares[shared] = _Share(asyncio.Semaphore(limit))
    share.users += 1
    try:
        async with share.semaphore:
            return await run_sync(function, *args, **kwargs)
    finally:
        share.users -= 1
        if share.users == 0:
            del _shares[shared]


@dataclass
class _Share:
    semaphore: asyncio.Semaphore
    users: int = 0


_shares: dict[tuple[asyncio.AbstractEventLoop, Hashable], _Share] = {}


async def release(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``run_sync`` for work that only ends a transaction it holds (a commit, a rollback)."""
    return await _run_on("portal-release", function, *args, **kwargs)


async def _run_on(pool: str, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    context = contextvars.copy_context()
    done: Future[T] = _pool(pool).submit(context.run, function, *args, **kwargs)  # type: ignore[arg-type]
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
