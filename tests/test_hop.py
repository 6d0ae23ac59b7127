"""The request's thread hop (``app.http.hop``): what anyio's ``to_thread`` guaranteed still
holds."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from app.http import hop
from app.kit.logs import request_id_var

T = TypeVar("T")


def run_alone(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a thread of its own: a browser test's Playwright session keeps an
    event loop running on the main thread, where asyncio.run refuses to start another."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(asyncio.run(main))
        except BaseException as error:  # handed to the caller below
            failure.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def test_the_thread_sees_the_request_id_of_its_caller() -> None:
    async def caller() -> str:
        request_id_var.set("req-42")
        return await hop.run_sync(request_id_var.get)

    assert run_alone(caller()) == "req-42"


def test_a_cancelled_caller_waits_for_the_thread_before_it_goes() -> None:
    """Else the request's error handling (a rollback) would use the session the thread still
    uses."""
    started, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def work() -> None:
        started.set()
        release.wait(5)
        finished.append("work")

    async def scenario() -> list[str]:
        task = asyncio.create_task(hop.run_sync(work))
        await asyncio.to_thread(started.wait, 5)
        task.cancel()
        await asyncio.sleep(0.05)
        seen = [f"done={task.done()}"]
        release.set()
        try:
            await task
        except asyncio.CancelledError:
            seen.append("cancelled")
        return seen + finished

    assert run_alone(scenario()) == ["done=False", "cancelled", "work"]


def test_errors_reach_the_caller() -> None:
    def fail() -> None:
        raise ValueError("boom")

    async def caller() -> str:
        try:
            await hop.run_sync(fail)
        except ValueError as error:
            return str(error)
        return "no error"

    assert run_alone(caller()) == "boom"


def test_ending_a_transaction_never_waits_behind_the_requests_on_every_thread() -> None:
    """What ends a transaction (its row locks with it) goes on a lane of its own: on the
    request threads it queued behind requests that waited for those very locks (issue 53)."""
    hop.set_threads(1, 2)
    busy, release = threading.Event(), threading.Event()

    def request_waiting_for_a_lock() -> None:
        busy.set()
        release.wait(10)

    async def scenario() -> str:
        waiting = asyncio.create_task(hop.run_sync(request_waiting_for_a_lock))
        await asyncio.to_thread(busy.wait, 5)
        try:
            return await asyncio.wait_for(hop.release(lambda: "rolled back"), timeout=5)
        finally:
            release.set()
            await waiting

    try:
        assert run_alone(scenario()) == "rolled back"
    finally:
        hop.set_threads(hop.DEFAULT_THREADS)


def test_one_keys_work_leaves_the_others_a_thread() -> None:
    """One tenant's writes, each waiting for a row, never hold every thread (issue 53)."""
    hop.set_threads(3)
    waiting, release = threading.Semaphore(0), threading.Event()

    def write_waiting_for_a_row() -> str:
        waiting.release()
        release.wait(10)
        return "acme"

    async def scenario() -> list[str]:
        acme = [asyncio.create_task(hop.run_as("acme", write_waiting_for_a_row))
                for _ in range(5)]
        for _ in range(2):
            await asyncio.to_thread(waiting.acquire, True, 5)
        try:
            other = await asyncio.wait_for(hop.run_as("globex", lambda: "globex"), timeout=5)
        finally:
            release.set()
        return [other, *await asyncio.gather(*acme)]

    try:
        assert run_alone(scenario()) == ["globex"] + ["acme"] * 5
    finally:
        hop.set_threads(hop.DEFAULT_THREADS)


def test_an_app_that_stops_after_another_started_drops_none_of_the_newer_ones_work() -> None:
    """Two apps in one process (a served portal winding down while the next one serves): the
    first one's stop left the second's requests cancelled, each a 500 (seen in the browser
    tests as a page without its sign-in link)."""
    first = hop.set_threads(1)
    second = hop.set_threads(1)
    started, release = threading.Event(), threading.Event()

    def holding_the_thread() -> str:
        started.set()
        release.wait(10)
        return "held"

    async def scenario() -> list[str]:
        running = asyncio.create_task(hop.run_sync(holding_the_thread))
        await asyncio.to_thread(started.wait, 5)
        queued = asyncio.create_task(hop.run_sync(lambda: "queued"))
        await asyncio.sleep(0.05)
        hop.stop(first)  # the older app's end
        release.set()
        return [await running, await asyncio.wait_for(queued, timeout=5)]

    try:
        assert run_alone(scenario()) == ["held", "queued"]
    finally:
        hop.stop(second)
        hop.set_threads(hop.DEFAULT_THREADS)
