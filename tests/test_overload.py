"""Past capacity the portal turns requests away with 503 + Retry-After; it never answers 500."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from fastapi.testclient import TestClient
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from app.database.core import Database
from app.http.middleware import LoadSheddingMiddleware
from app.kit.config import Settings
from app.process.asgi import create_app

T = TypeVar("T")


class Gate:
    """An app whose requests wait until the test opens the gate."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.entered = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.entered += 1
        await self.opened.wait()
        await PlainTextResponse(Request(scope).url.path)(scope, receive, send)


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """On a thread of its own: a browser test's session may keep an event loop on this one."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _overload(limit: int, paths: list[str]) -> tuple[Gate, list[httpx.Response]]:
    gate = Gate()
    app = LoadSheddingMiddleware(gate, limit=limit, exempt=("/healthz",))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://portal") as client:
        pending = [asyncio.create_task(client.get(path)) for path in paths]
        while gate.entered + sum(task.done() for task in pending) < len(paths):
            await asyncio.sleep(0.01)
        gate.opened.set()
        return gate, list(await asyncio.gather(*pending))


def test_requests_past_the_limit_are_turned_away_with_retry_after() -> None:
    gate, responses = _run(_overload(2, ["/api/v1/tenants"] * 5))
    assert sorted(r.status_code for r in responses) == [200, 200, 503, 503, 503]
    assert gate.entered == 2
    refused = next(r for r in responses if r.status_code == 503)
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["status"] == 503


def test_probes_are_never_turned_away() -> None:
    _, responses = _run(_overload(1, ["/api/v1/tenants", "/healthz", "/healthz"]))
    assert [r.status_code for r in responses] == [200, 200, 200]


def test_a_request_finds_room_again_once_others_finish() -> None:
    async def one_after_another() -> list[int]:
        gate = Gate()
        gate.opened.set()
        app = LoadSheddingMiddleware(gate, limit=1, exempt=())
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://portal") as client:
            return [(await client.get("/x")).status_code for _ in range(3)]

    assert _run(one_after_another()) == [200, 200, 200]


def test_no_free_database_connection_is_a_503_not_a_500(
    settings: Settings, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    database = Database(url, pool_size=1, max_overflow=0, pool_timeout=0.1)
    app = create_app(settings.model_copy(update={"database_url": url}), database)
    held = database.engine.connect()  # the pool's only connection
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            response = client.get("/api/v1/me", headers={"Authorization": "Bearer gtp_x"})
    finally:
        held.close()
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.json()["title"] == "Service unavailable"


@pytest.mark.parametrize("setting", ["PORTAL_WEB_THREADS", "PORTAL_WEB_MAX_IN_FLIGHT"])
def test_capacity_settings_refuse_nonsense(setting: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(setting, "0")
    with pytest.raises(ValueError, match=setting.removeprefix("PORTAL_").lower()):
        Settings(env="test")
