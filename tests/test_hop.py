"""The request's thread hop (``app.hop``): what anyio's ``to_thread`` guaranteed still holds."""

from __future__ import annotations

import asyncio
import threading

from app import hop
from app.logs import request_id_var


def test_the_thread_sees_the_request_id_of_its_caller() -> None:
    async def caller() -> str:
        request_id_var.set("req-42")
        return await hop.run_sync(request_id_var.get)

    assert asyncio.run(caller()) == "req-42"


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

    assert asyncio.run(scenario()) == ["done=False", "cancelled", "work"]


def test_errors_reach_the_caller() -> None:
    def fail() -> None:
        raise ValueError("boom")

    async def caller() -> str:
        try:
            await hop.run_sync(fail)
        except ValueError as error:
            return str(error)
        return "no error"

    assert asyncio.run(caller()) == "boom"
