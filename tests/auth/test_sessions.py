"""Browser sessions: server-side, timed out, CSRF-protected, secure over https."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.auth.models import WebSession
from app.auth.principal_cache import forget_everyone
from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.process.asgi import create_app
from tests.support import oidc
from tests.support.sql import statements_during
from tests.support.web import csrf_of


def _csrf(client: TestClient) -> str:
    page = client.get("/", headers={"accept": "text/html"})
    return csrf_of(page.text)


def test_the_cookie_holds_only_an_id_and_the_row_only_its_hash(
    client: TestClient, db: Session
) -> None:
    oidc.sign_in(client, "bob@example.com")
    cookie = client.cookies["portal_session"]
    rows = db.scalars(select(WebSession)).all()
    assert cookie not in [row.id_hash for row in rows]
    assert any(row.data.get("uid") for row in rows)


def _hours_pass(db: Session, **moved: Any) -> None:
    """The session's row as it is after hours: long past the seconds a process keeps it."""
    db.execute(update(WebSession).values(**moved))
    forget_everyone()


def test_an_idle_session_ends(client: TestClient, db: Session) -> None:
    oidc.sign_in(client, "bob@example.com")
    _hours_pass(db, last_seen_at=utcnow() - timedelta(hours=2))
    assert client.get("/api/v1/me").status_code == 401


def test_a_session_ends_at_its_absolute_lifetime_even_if_active(
    client: TestClient, db: Session
) -> None:
    oidc.sign_in(client, "bob@example.com")
    _hours_pass(db, expires_at=utcnow() - timedelta(seconds=1))
    assert client.get("/api/v1/me").status_code == 401


def test_a_signed_in_session_is_read_once_while_kept_and_a_sign_out_ends_it_at_once(
    client: TestClient, database: Database
) -> None:
    oidc.sign_in(client, "bob@example.com")
    reads = [[s for s in statements_during(database, lambda: client.get("/api/v1/me"))
              if "FROM web_sessions" in s] for _ in range(3)]
    assert [len(r) for r in reads] == [1, 0, 0]  # read once, then kept
    forget_everyone()  # as the seconds it is kept pass
    assert len([s for s in statements_during(database, lambda: client.get("/api/v1/me"))
                if "FROM web_sessions" in s]) == 1
    cookie = client.cookies["portal_session"]
    signed_out = client.post("/auth/logout", headers={"X-CSRF-Token": _csrf(client)},
                             follow_redirects=False)
    assert signed_out.status_code == 303
    client.cookies.clear()
    replayed = client.get("/api/v1/me", headers={"Cookie": f"portal_session={cookie}"})
    assert replayed.status_code == 401


def test_signing_in_again_reads_the_stored_session_not_the_kept_one(
    client: TestClient, database: Database
) -> None:
    """Where to go after signing in is kept in the row: another process may have just
    written it, so the sign-in pages never answer from what this one keeps."""
    oidc.sign_in(client, "bob@example.com")
    client.get("/api/v1/me")  # kept from here on
    seen = statements_during(database, lambda: client.get("/auth/login?next=/tokens",
                                                          follow_redirects=False))
    # The lookup of a request's session (its data and times), not the write's own read.
    lookups = [s for s in seen if "FROM web_sessions" in s
               and "web_sessions.id_hash" not in s.split("FROM")[0]]
    assert len(lookups) == 1
    landed = oidc.sign_in(client, "bob@example.com", next_path="/tokens")
    assert landed.headers["location"] == "/tokens"


def test_a_cross_origin_post_without_the_token_is_refused(client: TestClient) -> None:
    oidc.sign_in(client, "bob@example.com")
    forged = client.post("/auth/logout", headers={"origin": "https://evil.example"})
    assert forged.status_code == 403
    assert client.get("/api/v1/me").status_code == 200


def test_htmx_requests_may_send_the_token_as_a_header(client: TestClient) -> None:
    oidc.sign_in(client, "bob@example.com")
    response = client.post("/auth/logout", headers={"x-csrf-token": _csrf(client)},
                           follow_redirects=False)
    assert response.status_code == 303
    assert client.get("/api/v1/me").status_code == 401


def test_the_csrf_token_is_on_body_for_htmx(client: TestClient) -> None:
    oidc.sign_in(client, "bob@example.com")
    page = client.get("/", headers={"accept": "text/html"})
    assert f'hx-headers=\'{{"X-CSRF-Token": "{_csrf(client)}"}}\'' in page.text


@pytest.fixture
def https_client(settings: Settings, database: Database) -> Iterator[TestClient]:
    with TestClient(create_app(settings, database), base_url="https://portal.test") as client:
        yield client


def test_over_https_the_cookie_is_secure_and_host_prefixed(https_client: TestClient) -> None:
    response = https_client.get("/auth/login", follow_redirects=False)
    cookie = response.headers["set-cookie"]
    assert cookie.startswith("__Host-portal_session=")
    assert "Secure" in cookie
    assert "Path=/" in cookie
    assert "Domain" not in cookie


def test_over_https_hsts_is_sent(https_client: TestClient) -> None:
    assert "max-age=" in https_client.get("/healthz").headers["strict-transport-security"]


def test_over_plain_http_no_hsts(client: TestClient) -> None:
    assert "strict-transport-security" not in client.get("/healthz").headers


def test_production_cookies_are_secure_even_behind_a_plain_http_hop(
    settings: Settings, database: Database
) -> None:
    production = settings.model_copy(update={"env": "production"})
    with TestClient(create_app(production, database)) as client:
        cookie = client.get("/auth/login", follow_redirects=False).headers["set-cookie"]
    assert cookie.startswith("__Host-portal_session=")
    assert "Secure" in cookie


def _session_cookie(response_headers: list[str]) -> list[str]:
    return [c for c in response_headers if "portal_session=" in c]


def test_in_production_the_session_cookie_is_secure_http_only_and_lax(
    settings: Settings, database: Database
) -> None:
    """Signed in over the TLS-terminating proxy's forwarded https: the cookie that holds the
    session, and only a secure one, is sent back."""
    production = settings.model_copy(update={"env": "production"})
    with TestClient(create_app(production, database), base_url="https://portal.test") as client:
        signed_in = oidc.sign_in(client, "bob@example.com")
        (cookie,) = _session_cookie(signed_in.headers.get_list("set-cookie"))
        assert client.get("/api/v1/me").status_code == 200
    attributes = [part.strip() for part in cookie.split(";")]
    assert attributes[0].startswith("__Host-portal_session=")
    assert {"Secure", "HttpOnly", "SameSite=Lax", "Path=/"} <= set(attributes)


def test_in_development_over_plain_http_the_session_works_without_secure(
    oidc_issuer: str, database: Database
) -> None:
    """``portal dev`` serves http://127.0.0.1: a Secure cookie would never come back."""
    development = Settings(env="development", database_url="sqlite://", oidc_issuer=oidc_issuer)
    with TestClient(create_app(development, database)) as client:
        signed_in = oidc.sign_in(client, "bob@example.com")
        (cookie,) = _session_cookie(signed_in.headers.get_list("set-cookie"))
        me = client.get("/api/v1/me")
    attributes = [part.strip() for part in cookie.split(";")]
    assert attributes[0].startswith("portal_session=")
    assert "Secure" not in attributes
    assert {"HttpOnly", "SameSite=Lax"} <= set(attributes)
    assert me.status_code == 200
    assert me.json()["email"] == "bob@example.com"
