"""Who a caller is, remembered across requests: never past a change made through this portal,
at most a few seconds past one made elsewhere (another replica, an operator's SQL)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.auth import principal_cache
from app.auth.models import User
from app.auth.principal import Principal
from app.auth.principal_cache import PrincipalCache
from app.database.core import Database
from app.kit.config import Settings
from app.process.asgi import create_app
from app.tenants.models import Membership
from tests import factories
from tests.support.principals import bearer
from tests.support.sql import statements_during
from tests.support.tenancy import build_tenancy, headers


def test_a_second_request_with_the_same_token_asks_nobody_who_it_is(
    client: TestClient, db: Session, database: Database
) -> None:
    auth = bearer(db, factories.user(db))
    assert client.get("/api/v1/me", headers=auth).status_code == 200
    again = statements_during(database, lambda: client.get("/api/v1/me", headers=auth))
    assert not [s for s in again if "api_tokens" in s or "memberships" in s]


def test_a_token_revoked_through_the_portal_stops_working_at_once(
    client: TestClient, db: Session
) -> None:
    user = factories.user(db)
    created = client.post("/api/v1/tokens", json={"name": "ci", "scopes": ["read"]},
                          headers=bearer(db, user)).json()
    auth = {"Authorization": f"Bearer {created['token']}"}
    assert client.get("/api/v1/me", headers=auth).status_code == 200
    assert client.delete(f"/api/v1/tokens/{created['id']}",
                         headers=bearer(db, user)).status_code == 204
    assert client.get("/api/v1/me", headers=auth).status_code == 401


def test_creating_a_token_leaves_the_callers_already_known_known(
    client: TestClient, db: Session, database: Database
) -> None:
    """A CI job that mints a token per run does not make every caller be looked up again."""
    auth = bearer(db, factories.user(db))
    other = bearer(db, factories.user(db))
    assert client.get("/api/v1/me", headers=other).status_code == 200
    assert client.post("/api/v1/tokens", json={"name": "ci", "scopes": ["read"]},
                       headers=auth).status_code == 201
    again = statements_during(database, lambda: client.get("/api/v1/me", headers=other))
    assert not [s for s in again if "api_tokens" in s or "memberships" in s]


def test_a_user_changed_with_a_new_token_in_the_same_commit_is_looked_up_again(
    client: TestClient, db: Session, database: Database
) -> None:
    user = factories.user(db)
    auth = bearer(db, user)
    assert client.get("/api/v1/me", headers=auth).status_code == 200
    with database.transaction() as elsewhere:
        changed = elsewhere.get_one(User, user.id)
        changed.name = "Renamed"
        bearer(elsewhere, changed)
    assert client.get("/api/v1/me", headers=auth).json()["name"] == "Renamed"


def test_a_member_removed_through_the_portal_loses_the_tenant_at_once(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    member = headers(db, t.acme_member)
    assert client.get("/api/v1/tenants/acme", headers=member).status_code == 200
    membership = db.scalar(select(Membership.id).where(Membership.user_id == t.acme_member.id))
    assert client.delete(f"/api/v1/tenants/acme/members/{membership}",
                         headers=headers(db, t.acme_admin)).status_code == 204
    assert client.get("/api/v1/tenants/acme", headers=member).status_code == 404


@pytest.fixture
def uncached_client(settings: Settings, database: Database) -> Iterator[TestClient]:
    uncached = settings.model_copy(update={"auth_cache_seconds": 0})
    with TestClient(create_app(uncached, database)) as test_client:
        yield test_client


def test_with_the_cache_off_a_change_made_elsewhere_applies_at_once(
    uncached_client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    member = headers(db, t.acme_member)
    assert uncached_client.get("/api/v1/tenants/acme", headers=member).status_code == 200
    db.execute(delete(Membership).where(Membership.user_id == t.acme_member.id))
    assert uncached_client.get("/api/v1/tenants/acme", headers=member).status_code == 404


def test_a_change_made_elsewhere_applies_once_the_cache_time_is_up(
    client: TestClient, db: Session, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = build_tenancy(db)
    member = headers(db, t.acme_member)
    assert client.get("/api/v1/tenants/acme", headers=member).status_code == 200
    db.execute(delete(Membership).where(Membership.user_id == t.acme_member.id))
    later = principal_cache.monotonic() + settings.auth_cache_seconds
    monkeypatch.setattr(principal_cache, "monotonic", lambda: later)
    assert client.get("/api/v1/tenants/acme", headers=member).status_code == 404


def _principal(user_id: int) -> Principal:
    return Principal(user=User(id=user_id, email=f"u{user_id}@example.com"), via="token")


def test_the_cache_keeps_the_most_recently_used_callers_up_to_its_size() -> None:
    cache = PrincipalCache(seconds=60, max_entries=2)
    for user_id in (1, 2):
        cache.put(user_id, _principal(user_id), None)
    assert cache.get(1) is not None  # 1 is now the most recent
    cache.put(3, _principal(3), None)
    assert [cache.get(k) is not None for k in (1, 2, 3)] == [True, False, True]
