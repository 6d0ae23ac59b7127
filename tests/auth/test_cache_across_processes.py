"""Two `portal serve` processes on one PostgreSQL database: a change made through one (a revoked
token, a removed member, a suspended tenant, a sign-out) is honoured by the other within a
bound, although each keeps callers, tenants and browser sessions cached for a minute here."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from datetime import timedelta

import httpx
import pytest
from sqlalchemy.orm import Session

from app.auth.models import WebSession
from app.auth.sessions import PLAIN_COOKIE, hash_session_id
from app.database.core import Database, utcnow
from tests import factories
from tests.support.principals import bearer
from tests.support.serve_process import serving, serving_children
from tests.support.waiting import wait_for

# What operator.md promises: a change applies in every process within this long.
BOUND_SECONDS = 2.0
CACHED = {"PORTAL_AUTH_CACHE_SECONDS": "60"}
ONE = ("--workers", "1")


@pytest.fixture
def world(own_pg_database: Database) -> dict[str, dict[str, str]]:
    """acme with an admin and a member; a platform admin; one bearer token each."""
    with own_pg_database.session() as db:
        headers = _people(db)
        db.commit()
    return headers


def _people(db: Session) -> dict[str, dict[str, str]]:
    acme = factories.tenant(db, "acme")
    admin = factories.user(db, "platform@example.com")
    admin.is_platform_admin = True
    people = {"platform": admin}
    for role in ("admin", "member"):
        people[role] = factories.user(db, f"{role}@acme.example")
        factories.membership(db, acme, people[role], role)
    headers = {name: bearer(db, user) for name, user in people.items()}
    return {**headers, "platform_browser": _browser_session(db, admin.id)}


def _browser_session(db: Session, user_id: int) -> dict[str, str]:
    """A signed-in browser's cookie, and the CSRF token its pages would carry."""
    session_id, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(16)
    now = utcnow()
    db.add(WebSession(id_hash=hash_session_id(session_id), user_id=user_id,
                      data={"uid": user_id, "csrf": csrf}, created_at=now, last_seen_at=now,
                      expires_at=now + timedelta(hours=1)))
    return {"Cookie": f"{PLAIN_COOKIE}={session_id}", "X-CSRF-Token": csrf}


def _within_bound(check: Callable[[], bool], what: str) -> float:
    """Seconds until ``check()`` held, failing past the bound."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < BOUND_SECONDS, f"{what} after {BOUND_SECONDS} s"
        time.sleep(0.05)
    return time.monotonic() - started


def test_changes_made_through_one_process_apply_in_the_other(
        own_pg_database: Database, world: dict[str, dict[str, str]]) -> None:
    # One serving process each: a request then always finds what the one before it kept.
    with serving(own_pg_database, *ONE, env=CACHED) as (one, _p1), \
            serving(own_pg_database, *ONE, env=CACHED) as (other, _p2):
        member, platform, browser = world["member"], world["platform"], world["platform_browser"]
        for base in (one, other):  # both cache the member, the admin, its session and acme
            assert httpx.get(f"{base}/api/v1/tenants/acme", headers=member).status_code == 200
            assert httpx.get(f"{base}/api/v1/me", headers=platform).status_code == 200
            assert httpx.get(f"{base}/api/v1/me", headers=browser).status_code == 200

        suspended = httpx.patch(f"{one}/api/v1/tenants/acme", headers=platform,
                                json={"state": "suspended"})
        assert suspended.status_code == 200, suspended.text
        _within_bound(lambda: httpx.get(f"{other}/api/v1/tenants/acme", headers=member)
                      .json()["state"] == "suspended", "the other process still shows acme active")

        members = httpx.get(f"{one}/api/v1/tenants/acme/members", headers=platform).json()
        member_id = next(m["id"] for m in members["items"] if m["email"] == "member@acme.example")
        removed = httpx.delete(f"{one}/api/v1/tenants/acme/members/{member_id}", headers=platform)
        assert removed.status_code == 204, removed.text
        _within_bound(lambda: httpx.get(f"{other}/api/v1/tenants/acme", headers=member)
                      .status_code == 404, "the other process still lets the removed member in")

        revoked = httpx.delete(f"{one}/api/v1/tokens/current", headers=platform)
        assert revoked.status_code == 204, revoked.text
        _within_bound(lambda: httpx.get(f"{other}/api/v1/me", headers=platform)
                      .status_code == 401, "the other process still takes the revoked token")

        for base in (one, other):  # kept again (the revocation emptied every cache)
            assert httpx.get(f"{base}/api/v1/me", headers=browser).status_code == 200
        signed_out = httpx.post(f"{one}/auth/logout", headers=browser)
        assert signed_out.status_code == 303, signed_out.text
        _within_bound(lambda: httpx.get(f"{other}/api/v1/me", headers=browser)
                      .status_code == 401, "the other process still takes the ended session")


def test_serve_runs_the_processes_asked_for(own_pg_database: Database,
                                            world: dict[str, dict[str, str]]) -> None:
    with serving(own_pg_database, "--workers", "2", env=CACHED) as (base, supervisor):
        wait_for(lambda: len(serving_children(supervisor.pid)) == 2,
                 lambda: f"two serving processes under `portal serve --workers 2`, found "
                         f"{serving_children(supervisor.pid)}")
        assert httpx.get(f"{base}/api/v1/me", headers=world["member"]).status_code == 200

