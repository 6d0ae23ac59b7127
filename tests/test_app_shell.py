"""The app shell: probes, request ids, problem details, static assets and headers."""

from __future__ import annotations

import re
import subprocess
import sys

from fastapi.testclient import TestClient

from app.database.core import Database
from app.kit.config import Settings
from app.process.asgi import create_app


def test_healthz_says_alive(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}


def test_readyz_checks_the_database(client: TestClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["database"] == "ok"


def test_readyz_is_503_when_the_database_is_unreachable(settings: Settings) -> None:
    unreachable = Database("postgresql+psycopg://nobody@127.0.0.1:1/nothing",
                           connect_args={"connect_timeout": 1})
    with TestClient(create_app(settings, unreachable)) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["status"] == "unavailable"


def test_every_response_carries_a_request_id(client: TestClient) -> None:
    first, second = client.get("/healthz"), client.get("/healthz")
    assert first.headers["x-request-id"] != second.headers["x-request-id"]


def test_a_sane_incoming_request_id_is_kept_and_a_hostile_one_replaced(
    client: TestClient,
) -> None:
    kept = client.get("/healthz", headers={"X-Request-ID": "lb-1234"})
    assert kept.headers["x-request-id"] == "lb-1234"
    replaced = client.get("/healthz", headers={"X-Request-ID": "bad id\nInjected: yes"})
    assert replaced.headers["x-request-id"] != "bad id\nInjected: yes"
    assert "injected" not in replaced.headers


def test_api_errors_are_problem_json_with_the_request_id(client: TestClient) -> None:
    response = client.get("/api/v1/me")
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == 401
    assert problem["instance"] == "/api/v1/me"
    assert problem["request_id"] == response.headers["x-request-id"]


def test_unknown_api_path_is_a_404_problem(client: TestClient) -> None:
    response = client.get("/api/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["title"] == "Not Found"


def test_htmx_is_vendored_and_served_locally(client: TestClient) -> None:
    page = client.get("/", headers={"accept": "text/html"})
    assert '/static/vendor/htmx-2.0.11.min.js' in page.text
    assert "https://" not in page.text.split("<body")[0]
    script = client.get("/static/vendor/htmx-2.0.11.min.js")
    assert script.status_code == 200
    assert "htmx" in script.text[:200]


def test_pages_link_the_portals_own_icon_and_favicon_ico_answers(client: TestClient) -> None:
    page = client.get("/", headers={"accept": "text/html"})
    head = page.text.split("<body")[0]
    assert re.search(r'<link rel="icon" href="[^"]*/static/favicon\.svg" type="image/svg\+xml">',
                     head)
    for path in ("/favicon.ico", "/static/favicon.svg"):
        icon = client.get(path)
        assert icon.status_code == 200, path
        assert icon.headers["content-type"].startswith("image/svg+xml")
        assert icon.text.startswith("<svg") and "<title>GPU Tenant Portal</title>" in icon.text


def test_the_portal_starts_without_deprecation_warnings() -> None:
    """Importing what `portal dev` runs (the OIDC client, the local IdP, the app) warns of
    nothing: no AuthlibDeprecationWarning on a newcomer's first screen."""
    code = ("import app.process.cli, app.process.asgi, app.process.devmode; "
            "app.process.asgi.create_app")
    started = subprocess.run([sys.executable, "-W", "default", "-c", code],
                             capture_output=True, text=True, timeout=120, check=False)
    assert started.returncode == 0, started.stderr
    assert "Warning" not in started.stderr, started.stderr


def test_pages_send_security_headers(client: TestClient) -> None:
    response = client.get("/", headers={"accept": "text/html"})
    policy = response.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy
    assert "'unsafe-inline'" not in policy
    assert response.headers["x-content-type-options"] == "nosniff"
    assert "referrer-policy" in response.headers


def test_anonymous_home_offers_sign_in(client: TestClient) -> None:
    page = client.get("/", headers={"accept": "text/html"})
    assert page.status_code == 200
    assert 'href="/auth/login"' in page.text


def test_openapi_document_is_served(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    assert "/api/v1/me" in schema["paths"]


def test_access_logs_never_carry_the_sign_in_code() -> None:
    import logging

    from app.kit.logs import AccessLogRedactor

    record = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s" %d', (
        "127.0.0.1", "GET", "/auth/callback?code=SECRET123&state=abc", 303), None)
    AccessLogRedactor().filter(record)
    line = record.getMessage()
    assert "SECRET123" not in line
    assert "abc" not in line
    assert "/auth/callback?code=[redacted]&state=[redacted]" in line


def test_a_nul_byte_in_a_path_or_filter_is_a_422_not_a_500(client: TestClient) -> None:
    for url in ("/api/v1/nodes?gpu_class=%00", "/api/v1/tenants/a%00b", "/api/v1/audit?actor=x%00"):
        response = client.get(url)
        assert response.status_code == 422, url
        assert response.headers["content-type"] == "application/problem+json"
        assert "NUL U+0000" in response.json()["detail"]
