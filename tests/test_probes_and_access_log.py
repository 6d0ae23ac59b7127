"""Health probes answer behind the request id and the security headers only, and every answer
leaves one access line with uvicorn's fields in the portal's log format (issue 31, item 5)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from app.database.core import Database
from app.kit.config import Settings
from app.kit.logs import HANDLER_NAME, configure_logging
from app.process.asgi import create_app
from tests.support.waiting import wait_for
from tests.support.web import free_port

SECURITY_HEADERS = ("content-security-policy", "x-frame-options", "x-content-type-options",
                    "referrer-policy")
LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO uvicorn\.access \[(?P<id>[^]]+)\] "
                  r'(?P<client>\S+) - "(?P<method>\S+) (?P<path>\S+) HTTP/1\.1" (?P<status>\d+)$')


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    with _captured() as buffer:
        yield buffer


@contextlib.contextmanager
def _captured() -> Iterator[io.StringIO]:
    """The portal's log handler, as ``portal serve`` configures it, writing to a buffer."""
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    configure_logging("INFO")
    handler = next(h for h in root.handlers if h.name == HANDLER_NAME)
    assert isinstance(handler, logging.StreamHandler)
    buffer = io.StringIO()
    handler.setStream(buffer)
    yield buffer
    root.handlers, root.level = saved_handlers, saved_level


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_probes_answer_with_the_security_headers_and_a_request_id(
    client: TestClient, path: str
) -> None:
    response = client.get(path, headers={"X-Request-ID": "probe-7"})
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    assert response.headers["x-request-id"] == "probe-7"
    for header in SECURITY_HEADERS:
        assert header in response.headers, header
    assert "set-cookie" not in response.headers


def test_a_probe_answers_from_an_address_whose_tokens_are_throttled(
    settings: Settings, database: Database
) -> None:
    """An orchestrator behind the same address as a caller with bad tokens still sees the
    replica alive: the failed-token throttle has nothing to say about a probe."""
    app = create_app(settings.model_copy(update={"auth_failures_per_minute": 3}), database)
    token = {"Authorization": f"Bearer gtp_{secrets.token_urlsafe(36)}"}
    with TestClient(app, client=("203.0.113.9", 40000)) as shared:
        refused = [shared.get("/api/v1/me", headers=token).status_code for _ in range(5)]
        probe = shared.get("/healthz", headers=token)
    assert refused[-1] == 429
    assert probe.status_code == 200


def test_each_answer_leaves_one_access_line_with_its_fields(
    client: TestClient, log_lines: io.StringIO
) -> None:
    client.get("/healthz", headers={"X-Request-ID": "lb-42"})
    client.get("/auth/callback?code=SECRET123&state=abc", headers={"X-Request-ID": "lb-43"})
    client.get("/api/v1/nowhere", headers={"X-Request-ID": "lb-44"})
    access = [m.groupdict() for m in map(LINE.match, log_lines.getvalue().splitlines()) if m]
    assert [(a["id"], a["method"], a["status"]) for a in access] == [
        ("lb-42", "GET", "200"), ("lb-43", "GET", access[1]["status"]), ("lb-44", "GET", "404")]
    assert access[0]["path"] == "/healthz"
    assert access[0]["client"] == "testclient:50000"
    assert access[1]["path"] == "/auth/callback?code=[redacted]&state=[redacted]"
    written = [line for line in log_lines.getvalue().splitlines() if "uvicorn.access" in line]
    assert len(written) == 3
    assert not any("SECRET123" in line for line in written)


def test_the_access_line_is_written_after_a_quieter_server_ran_in_this_process(
    client: TestClient
) -> None:
    """A server started in this process before (the suite's live servers, say) set uvicorn's
    loggers to its own level; configuring the portal's logging puts them back under the root's."""
    uvicorn.Config(client.app, log_level="warning")
    with _captured() as buffer:
        client.get("/healthz", headers={"X-Request-ID": "lb-60"})
    assert [line for line in buffer.getvalue().splitlines() if "[lb-60]" in line]


def test_the_access_line_goes_through_logging_when_another_handler_writes_it(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="uvicorn.access"):
        client.get("/healthz?token=SECRET", headers={"X-Request-ID": "lb-50"})
    lines = [r.getMessage() for r in caplog.records if r.name == "uvicorn.access"]
    assert lines == ['testclient:50000 - "GET /healthz?token=[redacted] HTTP/1.1" 200']


@pytest.mark.parametrize("workers", ["1", "2"])
def test_portal_serve_writes_one_access_line_per_answer(
    own_pg_database: Database, tmp_path: Path, workers: str
) -> None:
    """As deployed: uvicorn's own access line stays off, with one serving process (where it
    used to silence the app's line too) or several (where it used to come back: two lines)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    env["PORTAL_DATABASE_URL"] = own_pg_database.engine.url.render_as_string(hide_password=False)
    log = tmp_path / "serve.log"
    base = f"http://127.0.0.1:{port}"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.process.cli", "serve", "--port", str(port),
             "--workers", workers], env=env, stdout=sink, stderr=sink)
        try:
            wait_for(lambda: _answers(f"{base}/healthz"), f"portal serve on {base}", timeout=180)
            for n in range(3):
                assert httpx.get(f"{base}/api/v1/me",
                                 headers={"X-Request-ID": f"once-{n}"}).status_code == 401
        finally:
            process.terminate()
            process.wait(timeout=30)
    lines = [line for line in log.read_text().splitlines() if "uvicorn.access" in line]
    for n in range(3):
        assert len([line for line in lines if f"[once-{n}]" in line]) == 1, lines


def _answers(url: str) -> bool:
    try:
        return httpx.get(url).status_code == 200
    except httpx.TransportError:
        return False
