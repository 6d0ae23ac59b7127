"""API tokens: shown once, hashed at rest, scoped, expiring, revocable."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.auth import principal_cache, tokens
from app.auth.models import ApiToken, User
from app.auth.service import issue_api_token
from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.process.asgi import create_app
from tests import factories
from tests.support.principals import bearer
from tests.support.sql import statements_during, writes
from tests.support.web import csrf_of


def _create(client: TestClient, headers: dict[str, str], **body: object) -> dict[str, object]:
    payload = {"name": "ci", "scopes": ["read"], **body}
    response = client.post("/api/v1/tokens", json=payload, headers=headers)
    assert response.status_code == 201, response.text
    assert response.headers["cache-control"] == "no-store"
    created: dict[str, object] = response.json()
    return created


def test_a_new_token_works_and_only_its_hash_is_stored(client: TestClient, db: Session) -> None:
    user = factories.user(db)
    created = _create(client, bearer(db, user), scopes=["read", "write"])
    secret = str(created["token"])
    assert len(secret) >= 40
    me = client.get("/api/v1/me", headers={"Authorization": f"Bearer {secret}"})
    assert me.json()["email"] == user.email
    stored = db.scalar(select(ApiToken).where(ApiToken.id == created["id"]))
    assert stored is not None
    assert secret not in (stored.token_hash, stored.prefix)
    listed = client.get("/api/v1/tokens", headers=bearer(db, user)).json()["items"]
    assert all("token" not in item for item in listed)


def test_last_use_is_recorded(client: TestClient, db: Session) -> None:
    user = factories.user(db)
    token, secret = issue_api_token(db, user, name="t", scopes=["read"], expires_at=None,
                                    actor_label="test")
    assert token.last_used_at is None
    client.get("/api/v1/me", headers={"Authorization": f"Bearer {secret}"})
    last_used = select(ApiToken.last_used_at).where(ApiToken.id == token.id)
    assert db.scalar(last_used) is not None


def test_a_revoked_token_stops_working(client: TestClient, db: Session) -> None:
    user = factories.user(db)
    created = _create(client, bearer(db, user))
    auth = {"Authorization": f"Bearer {created['token']}"}
    assert client.get("/api/v1/me", headers=auth).status_code == 200
    revoke = client.delete(f"/api/v1/tokens/{created['id']}", headers=bearer(db, user))
    assert revoke.status_code == 204
    refused = client.get("/api/v1/me", headers=auth)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    actions = db.scalars(select(AuditEvent.action)).all()
    assert "api_token.revoke" in actions


def test_a_token_revokes_itself_even_read_only_and_only_itself(
    client: TestClient, db: Session
) -> None:
    user = factories.user(db)
    other = bearer(db, user)
    created = _create(client, bearer(db, user))  # a read-only token
    auth = {"Authorization": f"Bearer {created['token']}"}
    assert client.delete("/api/v1/tokens/current", headers=auth).status_code == 204
    assert client.get("/api/v1/me", headers=auth).status_code == 401
    assert client.get("/api/v1/me", headers=other).status_code == 200
    event = db.scalars(select(AuditEvent).where(AuditEvent.action == "api_token.revoke")).one()
    assert event.target_id == str(created["id"])


def _token_of(db: Session, user: User, *scopes: str) -> tuple[int, dict[str, str]]:
    token, secret = issue_api_token(db, user, name="t", scopes=list(scopes), expires_at=None,
                                    actor_label="test")
    db.flush()
    return token.id, {"Authorization": f"Bearer {secret}"}


@pytest.mark.parametrize("route", ["current", "by id"])
@pytest.mark.parametrize("scopes", [("read",), ("read", "write")])
def test_one_rule_for_both_revoke_routes_a_token_may_always_revoke_itself(
    client: TestClient, db: Session, route: str, scopes: tuple[str, ...]
) -> None:
    user = factories.user(db)
    token_id, auth = _token_of(db, user, *scopes)
    path = "/api/v1/tokens/current" if route == "current" else f"/api/v1/tokens/{token_id}"
    assert client.delete(path, headers=auth).status_code == 204
    assert client.get("/api/v1/me", headers=auth).status_code == 401


def test_a_read_only_token_cannot_revoke_another_token_of_its_user(
    client: TestClient, db: Session
) -> None:
    user = factories.user(db)
    _, reader = _token_of(db, user, "read")
    other_id, other = _token_of(db, user, "read")
    refused = client.delete(f"/api/v1/tokens/{other_id}", headers=reader)
    assert refused.status_code == 403
    assert "only itself" in refused.json()["detail"]
    assert client.get("/api/v1/me", headers=other).status_code == 200
    _, writer = _token_of(db, user, "read", "write")
    assert client.delete(f"/api/v1/tokens/{other_id}", headers=writer).status_code == 204


def test_without_a_token_there_is_no_current_token_to_revoke(client: TestClient) -> None:
    assert client.delete("/api/v1/tokens/current").status_code == 401


def test_an_expired_token_stops_working(client: TestClient, db: Session,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    user = factories.user(db)
    _, secret = issue_api_token(db, user, name="t", scopes=["read"],
                                expires_at=utcnow() + timedelta(seconds=30), actor_label="test")
    auth = {"Authorization": f"Bearer {secret}"}
    assert client.get("/api/v1/me", headers=auth).status_code == 200
    later = utcnow() + timedelta(seconds=31)
    # the token's own check and the cache of who callers are both read the clock
    monkeypatch.setattr(tokens, "utcnow", lambda: later)
    monkeypatch.setattr(principal_cache, "utcnow", lambda: later)
    assert client.get("/api/v1/me", headers=auth).status_code == 401


def test_a_user_cannot_revoke_someone_elses_token(client: TestClient, db: Session) -> None:
    owner, other = factories.user(db), factories.user(db)
    created = _create(client, bearer(db, owner))
    response = client.delete(f"/api/v1/tokens/{created['id']}", headers=bearer(db, other))
    assert response.status_code == 404
    auth = {"Authorization": f"Bearer {created['token']}"}
    assert client.get("/api/v1/me", headers=auth).status_code == 200


def test_a_read_only_token_cannot_write(client: TestClient, db: Session) -> None:
    user = factories.user(db)
    response = client.post("/api/v1/tokens", json={"name": "x", "scopes": ["read"]},
                           headers=bearer(db, user, "read"))
    assert response.status_code == 403


def test_a_token_cannot_mint_a_more_powerful_token(client: TestClient, db: Session) -> None:
    user = factories.user(db, admin=True)
    response = client.post("/api/v1/tokens", json={"name": "x", "scopes": ["admin"]},
                           headers=bearer(db, user, "read", "write"))
    assert response.status_code == 403


def test_platform_admin_powers_need_the_admin_scope(client: TestClient, db: Session) -> None:
    admin = factories.user(db, admin=True)
    assert client.get("/api/v1/me", headers=bearer(db, admin, "read")).json()[
        "platform_admin"] is False
    assert client.get("/api/v1/me", headers=bearer(db, admin, "admin")).json()[
        "platform_admin"] is True


def test_bad_token_requests_get_field_errors(client: TestClient, db: Session) -> None:
    user = factories.user(db)
    for body, field in [
        ({"name": "x", "scopes": ["root"]}, "scopes.0"),
        ({"name": "", "scopes": ["read"]}, "name"),
        ({"name": "a\nb", "scopes": ["read"]}, "name"),
        ({"name": "x", "scopes": ["read"], "expires_in_days": 1000}, "expires_in_days"),
        ({"name": "x", "scopes": ["read"], "expires_in_days": 1.5}, "expires_in_days"),
    ]:
        response = client.post("/api/v1/tokens", json=body, headers=bearer(db, user))
        assert response.status_code == 422, body
        assert field in [e["field"] for e in response.json()["errors"]], response.json()
    assert db.scalars(select(ApiToken).where(ApiToken.name == "x")).all() == []


def test_tokens_page_shows_a_new_secret_once(client: TestClient, db: Session) -> None:
    from tests.support import oidc

    oidc.sign_in(client, "bob@example.com")
    page = client.get("/tokens", headers={"accept": "text/html"})
    csrf = csrf_of(page.text)
    created = client.post("/tokens", data={"csrf_token": csrf, "name": "laptop",
                                           "scopes": ["read", "write"], "expires_in_days": "7"})
    assert created.status_code == 200
    secret = created.text.split('id="new-token-secret">')[1].split("<")[0]
    assert secret.startswith("gtp_")
    again = client.get("/tokens", headers={"accept": "text/html"})
    assert "laptop" in again.text
    assert secret not in again.text


def test_tokens_page_refuses_odd_digits_in_the_lifetime(client: TestClient, db: Session) -> None:
    from tests.support import oidc

    oidc.sign_in(client, "bob@example.com")
    page = client.get("/tokens", headers={"accept": "text/html"})
    csrf = csrf_of(page.text)
    # str.isdigit() holds for superscripts and for 5,000 digits, which int() refuses.
    for days in ("²", "1" * 5000):
        refused = client.post("/tokens", data={"csrf_token": csrf, "name": "laptop",
                                               "scopes": ["read"], "expires_in_days": days})
        assert refused.status_code == 422, (days[:10], refused.status_code)
    assert db.scalars(select(ApiToken).where(ApiToken.name == "laptop")).all() == []


def test_reads_within_the_same_minute_write_nothing(
    client: TestClient, db: Session, database: Database,
) -> None:
    user = factories.user(db)
    auth = bearer(db, user, "read")
    db.commit()
    first = writes(statements_during(database, lambda: client.get("/api/v1/me", headers=auth)))
    assert [s for s in first if "api_tokens" in s]  # the first use is noted
    again = statements_during(database, lambda: client.get("/api/v1/tenants", headers=auth))
    assert writes(again) == []


def test_a_request_never_waits_for_another_noting_the_same_token(
    settings: Settings, own_pg_database: Database,
) -> None:
    with own_pg_database.transaction() as db:
        user = factories.user(db)
        token, secret = issue_api_token(db, user, name="fan-out", scopes=["read"],
                                        expires_at=None, actor_label="test")
    app = create_app(settings, own_pg_database)
    answers: list[int] = []
    with TestClient(app) as client, own_pg_database.transaction() as holder:
        # Another request is noting this token's use: it holds the row until it commits.
        holder.execute(select(ApiToken).where(ApiToken.id == token.id).with_for_update())
        request = threading.Thread(target=lambda: answers.append(client.get(
            "/api/v1/me", headers={"Authorization": f"Bearer {secret}"}).status_code))
        request.start()
        request.join(timeout=10)
        waited = request.is_alive()
    request.join()
    assert not waited, "the request waited for the other one's row lock"
    assert answers == [200]
