"""Failed API tokens are throttled per client address and per token prefix, and refusals are
audited once per window and kind, the rest counted into one row (issue 30, item 5)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.auth.throttle import FailedAuthThrottle, FailedAuthThrottleMiddleware
from app.database import core
from app.database.core import Database
from app.kit.config import Settings
from app.process.asgi import create_app
from tests import factories
from tests.support.principals import bearer
from tests.support.waiting import wait_for

ATTACKER, OTHER = "203.0.113.7", "198.51.100.20"
SECURITY_HEADERS = ("content-security-policy", "x-frame-options", "x-content-type-options",
                    "referrer-policy")


def bad_token(prefix: str = "") -> dict[str, str]:
    secret = prefix or f"gtp_{secrets.token_urlsafe(4)}"
    return {"Authorization": f"Bearer {secret}{secrets.token_urlsafe(32)}"}


def from_address(app: FastAPI, address: str) -> TestClient:
    return TestClient(app, client=(address, 40000))


def denials(db: Session) -> list[AuditEvent]:
    db.expire_all()
    return list(db.scalars(select(AuditEvent).where(AuditEvent.action == "authz.denied")
                           .order_by(AuditEvent.id)))


def later_by(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    moved = core.monotonic() + seconds
    monkeypatch.setattr(core, "monotonic", lambda: moved)


@pytest.fixture
def app_with_limit(settings: Settings, database: Database) -> Callable[[int], FastAPI]:
    def make(limit: int) -> FastAPI:
        return create_app(settings.model_copy(update={"auth_failures_per_minute": limit}),
                          database)
    return make


def test_a_burst_of_bad_tokens_gets_429_after_the_limit_and_a_few_audit_rows(
    settings: Settings, database: Database, db: Session
) -> None:
    """The issue's 2,000 requests with a bad token, at the default limit."""
    app = create_app(settings, database)
    limit = settings.auth_failures_per_minute
    headers = bad_token()
    with from_address(app, ATTACKER) as attacker:
        answers = [attacker.get("/api/v1/me", headers=headers) for _ in range(2000)]
        rows_meanwhile = len(denials(db))
    assert [a.status_code for a in answers] == [401] * limit + [429] * (2000 - limit)
    throttled = answers[-1]
    assert throttled.headers["content-type"] == "application/problem+json"
    assert 1 <= int(throttled.headers["retry-after"]) <= 60
    assert throttled.json()["status"] == 429
    assert rows_meanwhile == 1
    # Written when the app stopped: one row per kind of refusal, counting the rest.
    rows = denials(db)
    assert len(rows) == 3
    assert sum((row.after or {}).get("count", 1) for row in rows) == 2000
    first, repeated, refused = rows
    assert first.target_id == "GET /api/v1/me"
    assert first.actor_label == f"anonymous ({ATTACKER})"
    assert (repeated.after or {})["count"] == limit - 1
    assert ((refused.after or {})["status"], (refused.after or {})["count"]) == (429, 2000 - limit)


def test_the_429_carries_the_security_headers(app_with_limit: Callable[[int], FastAPI]) -> None:
    attacker = from_address(app_with_limit(2), ATTACKER)
    for _ in range(2):
        attacker.get("/api/v1/me", headers=bad_token())
    throttled = attacker.get("/api/v1/me", headers=bad_token())
    assert throttled.status_code == 429
    for header in SECURITY_HEADERS:
        assert header in throttled.headers, header


def test_one_token_prefix_is_throttled_from_every_address(
    app_with_limit: Callable[[int], FastAPI]
) -> None:
    app = app_with_limit(5)
    guessed = "gtp_Ab3dE_"
    for n in range(5):
        answer = from_address(app, f"192.0.2.{n}").get("/api/v1/me", headers=bad_token(guessed))
        assert answer.status_code == 401
    elsewhere = from_address(app, "192.0.2.99")
    assert elsewhere.get("/api/v1/me", headers=bad_token(guessed)).status_code == 429
    assert elsewhere.get("/api/v1/me", headers=bad_token()).status_code == 401


def test_a_valid_token_is_served_whatever_other_requests_from_its_address_did(
    settings: Settings, database: Database, db: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's NAT: 300 bogus tokens from one address, then a platform admin's valid token
    (never seen before, so looked up) from the same address, at the default limit."""
    app = create_app(settings, database)
    attacker = from_address(app, ATTACKER)
    answers = [attacker.get("/api/v1/me", headers=bad_token()).status_code for _ in range(300)]
    limit = settings.auth_failures_per_minute
    assert answers == [401] * limit + [429] * (300 - limit)
    admin = bearer(db, factories.user(db, admin=True))
    for _ in range(3):
        assert attacker.get("/api/v1/me", headers=admin).status_code == 200
    # The guessing is still slowed: the address's failures are 429 for the rest of the minute.
    throttled = attacker.get("/api/v1/me", headers=bad_token())
    assert throttled.status_code == 429
    assert 1 <= int(throttled.headers["retry-after"]) <= 60
    assert from_address(app, OTHER).get("/api/v1/me", headers=bad_token()).status_code == 401
    later_by(monkeypatch, 61)
    assert attacker.get("/api/v1/me", headers=bad_token()).status_code == 401


def test_a_valid_token_whose_prefix_is_being_guessed_is_refused_unread(
    app_with_limit: Callable[[int], FastAPI], db: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = app_with_limit(3)
    headers = bearer(db, factories.user(db))
    prefix = headers["Authorization"][7:17]
    for n in range(3):
        from_address(app, f"192.0.2.{n}").get("/api/v1/me", headers=bad_token(prefix))
    assert from_address(app, OTHER).get("/api/v1/me", headers=headers).status_code == 429
    later_by(monkeypatch, 61)
    assert from_address(app, OTHER).get("/api/v1/me", headers=headers).status_code == 200


def test_successes_never_count_and_browsers_are_not_held_back(
    app_with_limit: Callable[[int], FastAPI], db: Session
) -> None:
    app = app_with_limit(2)
    good = bearer(db, factories.user(db))
    attacker = from_address(app, ATTACKER)
    assert all(attacker.get("/api/v1/me", headers=good).status_code == 200 for _ in range(5))
    attacker.get("/api/v1/me", headers=bad_token())
    assert attacker.get("/api/v1/me", headers=good).status_code == 200
    attacker.get("/api/v1/me", headers=bad_token())
    assert attacker.get("/api/v1/me", headers=bad_token()).status_code == 429
    assert attacker.get("/api/v1/me", headers=good).status_code == 200
    # No API token, nothing to refuse unread: a signed-out visit is answered as ever.
    assert attacker.get("/api/v1/me").status_code == 401


def test_an_ipv6_caller_is_counted_by_its_64_network(
    app_with_limit: Callable[[int], FastAPI]
) -> None:
    app = app_with_limit(2)
    for host in ("2001:db8:1:2::a", "2001:db8:1:2::b"):
        from_address(app, host).get("/api/v1/me", headers=bad_token())
    neighbour = from_address(app, "2001:db8:1:2:ffff::1")
    assert neighbour.get("/api/v1/me", headers=bad_token()).status_code == 429
    other_network = from_address(app, "2001:db8:1:3::1")
    assert other_network.get("/api/v1/me", headers=bad_token()).status_code == 401


def test_a_member_walking_other_tenants_makes_one_row_and_a_count_per_window(
    app_with_limit: Callable[[int], FastAPI], db: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = app_with_limit(60)
    outsider = factories.user(db)
    caller = from_address(app, ATTACKER)
    headers = bearer(db, outsider)
    for n in range(20):
        assert caller.get(f"/api/v1/tenants/t{n}", headers=headers).status_code == 404
    assert [row.target_id for row in denials(db)] == ["GET /api/v1/tenants/t0"]
    later_by(monkeypatch, 61)
    caller.get("/api/v1/tenants/t20", headers=headers)
    _first, counted, next_window = denials(db)
    assert counted.actor_id == outsider.id
    assert counted.target_id == "GET /api/v1/tenants/{tenant}"
    after: dict[str, Any] = counted.after or {}
    assert after["count"] == 19 and after["status"] == 404
    assert after["window_start"] < after["window_end"]
    assert next_window.target_id == "GET /api/v1/tenants/t20"


def test_the_audit_page_says_how_many_a_row_counts(
    app_with_limit: Callable[[int], FastAPI], db: Session
) -> None:
    app = app_with_limit(3)
    with from_address(app, ATTACKER) as attacker:
        for _ in range(10):
            attacker.get("/api/v1/me", headers=bad_token())
    admin = from_address(app, OTHER)
    page = admin.get("/audit?action=authz.", headers={**bearer(db, factories.user(db, admin=True)),
                                                      "accept": "text/html"})
    assert page.status_code == 200
    assert "7 times on " in page.text  # the throttled ones
    assert "2 times on " in page.text  # the refused ones after the first
    assert "any route" in page.text


def test_a_request_that_passed_the_gate_before_the_block_is_still_refused_unread(
    app_with_limit: Callable[[int], FastAPI], db: Session
) -> None:
    """As requests queued for a thread are when the failures ahead of them make the block:
    here the middleware's gate never blocks, so the refusal is the token lookup's own check
    (a valid token, which a lookup would have served)."""
    app = app_with_limit(2)
    for middleware in app.user_middleware:
        if getattr(middleware, "cls", None) is FailedAuthThrottleMiddleware:
            middleware.kwargs["throttle"] = FailedAuthThrottle(limit=0)
    headers = bearer(db, factories.user(db))
    attacker = from_address(app, ATTACKER)
    for _ in range(2):
        attacker.get("/api/v1/me", headers=bad_token(headers["Authorization"][7:17]))
    refused = from_address(app, OTHER).get("/api/v1/me", headers=headers)
    assert refused.status_code == 429
    assert refused.headers["content-type"] == "application/problem+json"
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    for header in SECURITY_HEADERS:
        assert header in refused.headers, header


def test_a_mistyped_trusted_proxy_is_refused_at_start() -> None:
    """uvicorn would silently never match it, and count every caller as the proxy."""
    with pytest.raises(ValidationError, match="'ingress' is not an IP address or network"):
        Settings(database_url="sqlite://", trusted_proxies="10.0.0.0/8, ingress")
    assert Settings(database_url="sqlite://", trusted_proxies="10.0.0.0/8, ::1").trusted_proxies


def quick_windows(settings: Settings) -> Settings:
    return settings.model_copy(update={"audit_denial_window_seconds": 0.2})


def test_a_closed_window_is_written_by_a_quiet_server(
    settings: Settings, sqlite_database: Database
) -> None:
    with TestClient(create_app(quick_windows(settings), sqlite_database)) as caller:
        for _ in range(3):
            caller.get("/api/v1/me", headers=bad_token())
        with sqlite_database.read_session() as session:
            wait_for(lambda: len(denials(session)) == 2, "the window's count to be written")
            assert (denials(session)[1].after or {})["count"] == 2


def test_on_the_tests_one_shared_connection_a_window_is_written_at_the_stop(
    settings: Settings, database: Database, db: Session
) -> None:
    """Written meanwhile, it could end a request's savepoint under it (a 500 under load)."""
    with TestClient(create_app(quick_windows(settings), database)) as caller:
        for _ in range(3):
            caller.get("/api/v1/me", headers=bad_token())
        time.sleep(1)
        assert len(denials(db)) == 1
    assert len(denials(db)) == 2
