"""Every answer carries the security headers and the request id: those the middlewares give
themselves (a control character's 422, a too deeply nested body's 422, a body's 413, the
load shedder's 503) and the 500 of an unexpected error, over https with HSTS."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.types import Receive, Scope, Send

from app.database.core import Database
from app.http.middleware import (
    CONTENT_SECURITY_POLICY,
    AnswerStampMiddleware,
    LoadSheddingMiddleware,
)
from app.kit.config import Settings
from app.process.asgi import create_app
from tests.support.kube import InMemoryConnector
from tests.support.serving import serving

CONTROL_CHARACTER = "/api/v1/tenants/a%01b"
DEEP_WITH_NUL = "[" * 5_000 + '"\\u0000"' + "]" * 5_000


def assert_security_headers(response: httpx.Response, *, https: bool = True) -> None:
    headers = response.headers
    assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert headers["x-frame-options"] == "DENY"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "same-origin"
    assert ("max-age=" in headers.get("strict-transport-security", "")) is https
    assert headers["x-request-id"]


@pytest.fixture
def app(settings: Settings, database: Database) -> FastAPI:
    return create_app(settings, database, kube=InMemoryConnector())


@pytest.fixture
def https_client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, base_url="https://portal.test",
                    raise_server_exceptions=False) as client:
        yield client


def test_a_control_characters_422_carries_them(https_client: TestClient) -> None:
    response = https_client.get(CONTROL_CHARACTER)
    assert response.status_code == 422
    assert_security_headers(response)


def test_a_too_deeply_nested_bodys_422_carries_them(https_client: TestClient) -> None:
    response = https_client.post("/api/v1/tenants", content=DEEP_WITH_NUL,
                                 headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert_security_headers(response)


def test_a_too_large_bodys_413_carries_them(https_client: TestClient,
                                           settings: Settings) -> None:
    response = https_client.post("/api/v1/tenants", content=b"{" * (settings.max_body_bytes + 1),
                                 headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert_security_headers(response)


def test_the_load_shedders_503_carries_them(app: FastAPI, https_client: TestClient) -> None:
    shedder = _middleware(app, LoadSheddingMiddleware)
    shedder.in_flight = shedder.limit  # as if that many requests were being served
    response = https_client.get("/api/v1/tenants")
    assert response.status_code == 503
    assert_security_headers(response)


def test_an_unexpected_errors_500_carries_them(app: FastAPI, https_client: TestClient) -> None:
    def broken() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/broken", broken)
    response = https_client.get("/broken")
    assert response.status_code == 500
    assert response.json()["request_id"] == response.headers["x-request-id"]
    assert_security_headers(response)


def test_behind_a_tls_proxy_a_middlewares_answer_carries_hsts(
        settings: Settings, database: Database) -> None:
    """As ``portal serve`` runs: uvicorn takes the scheme from the proxy's
    ``X-Forwarded-Proto``."""
    with serving(settings, database, InMemoryConnector()) as base, \
            httpx.Client(base_url=base) as http:
        proxied = http.get(CONTROL_CHARACTER, headers={"x-forwarded-proto": "https"})
        plain = http.get(CONTROL_CHARACTER)
    assert proxied.status_code == plain.status_code == 422
    assert_security_headers(proxied)
    assert_security_headers(plain, https=False)


def _middleware(app: FastAPI, kind: type[LoadSheddingMiddleware]) -> LoadSheddingMiddleware:
    layer: object = app.middleware_stack
    while not isinstance(layer, kind):
        layer = getattr(layer, "app")  # noqa: B009 - each layer wraps the next as .app
    return layer


def test_an_answer_setting_its_own_headers_keeps_its_policy_and_gets_ours_once() -> None:
    """A page with its own Content-Security-Policy keeps it; a framing or request-id header an
    answer set itself is replaced, never sent twice."""
    async def own_headers(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-security-policy", b"default-src 'none'"),
            (b"x-frame-options", b"SAMEORIGIN"), (b"x-request-id", b"made-up")]})
        await send({"type": "http.response.body", "body": b"ok"})

    client = TestClient(AnswerStampMiddleware(own_headers), base_url="https://portal")
    response = client.get("/", headers={"X-Request-ID": "abc-123"})
    raw = [name.lower() for name, _ in response.headers.raw]
    assert response.headers["content-security-policy"] == "default-src 'none'"
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-request-id"] == "abc-123"
    assert "max-age=" in response.headers["strict-transport-security"]
    assert len(raw) == len(set(raw))
