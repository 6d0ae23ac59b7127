"""The OIDC authorization code flow, end to end over HTTP against the local provider."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.auth.models import User
from tests import factories
from tests.support import oidc
from tests.support.web import csrf_of


def test_login_redirects_to_the_provider_with_pkce_state_and_nonce(client: TestClient) -> None:
    query = oidc.query_of(oidc.start_login(client))
    assert query["response_type"] == ["code"]
    assert query["code_challenge_method"] == ["S256"]
    assert query["state"][0] and query["nonce"][0] and query["code_challenge"][0]


def test_sign_in_creates_the_user_and_lands_on_next(
    client: TestClient, oidc_issuer: str, db: Session
) -> None:
    oidc.register_user(oidc_issuer, "carol@example.com", name="Carol", groups=["research"])
    response = oidc.sign_in(client, "carol@example.com", next_path="/api/v1/me")
    assert response.headers["location"] == "/api/v1/me"
    me = client.get("/api/v1/me").json()
    assert me["email"] == "carol@example.com"
    assert me["name"] == "Carol"
    assert me["platform_admin"] is False
    user = db.scalar(select(User).where(User.email == "carol@example.com"))
    assert user is not None and user.issuer == oidc_issuer


def test_the_admin_group_makes_a_platform_admin(client: TestClient) -> None:
    oidc.sign_in(client, "admin@example.com")
    assert client.get("/api/v1/me").json()["platform_admin"] is True


def test_profile_is_refreshed_at_each_sign_in(
    client: TestClient, oidc_issuer: str, db: Session
) -> None:
    oidc.register_user(oidc_issuer, "dave@example.com", name="Dave", groups=["platform-admins"])
    oidc.sign_in(client, "dave@example.com")
    oidc.register_user(oidc_issuer, "dave@example.com", name="David", groups=[])
    oidc.sign_in(client, "dave@example.com")
    me = client.get("/api/v1/me").json()
    assert (me["name"], me["platform_admin"]) == ("David", False)
    assert len(db.scalars(select(User).where(User.email == "dave@example.com")).all()) == 1


def test_a_pre_created_user_is_bound_at_first_sign_in_with_their_memberships(
    client: TestClient, db: Session
) -> None:
    invited = User(email="alice@example.com", name="")
    db.add(invited)
    db.flush()
    factories.membership(db, factories.tenant(db, "demo-x"), invited, role="admin")
    db.commit()
    oidc.sign_in(client, "alice@example.com")
    me = client.get("/api/v1/me").json()
    assert me["id"] == invited.id
    assert me["memberships"] == [{"tenant": "demo-x", "role": "admin"}]


def test_refused_consent_signs_nobody_in_and_is_audited(
    client: TestClient, db: Session
) -> None:
    callback = oidc.deny(oidc.start_login(client))
    response = oidc.finish(client, callback)
    assert response.status_code == 400
    assert "declined" in response.text
    assert client.get("/api/v1/me").status_code == 401
    failures = db.scalars(select(AuditEvent).where(AuditEvent.action == "auth.sign_in_failed"))
    assert [event.after for event in failures] == [{"reason": "access_denied"}]


def test_an_identity_the_portal_cannot_hold_is_refused_and_audited(
    client: TestClient, oidc_issuer: str, db: Session
) -> None:
    """An IdP asserting an address longer than any address (320) signs nobody in, with a
    reason, instead of a 500."""
    oidc.register_user(oidc_issuer, "overlong", email="o" * 330 + "@example.com")
    response = oidc.finish(client, oidc.consent(oidc.start_login(client), "overlong"))
    assert response.status_code == 400
    assert "longer than the portal can hold" in response.text
    assert client.get("/api/v1/me").status_code == 401
    failures = db.scalars(select(AuditEvent).where(AuditEvent.action == "auth.sign_in_failed"))
    assert [event.after for event in failures] == [{"reason": "identity_too_long"}]


def test_a_forged_state_is_refused(client: TestClient) -> None:
    callback = oidc.consent(oidc.start_login(client), "bob@example.com")
    forged = callback.replace("state=", "state=forged")
    response = oidc.finish(client, forged)
    assert response.status_code == 400
    assert client.get("/api/v1/me").status_code == 401


def test_a_callback_from_another_browser_is_refused(
    client: TestClient, settings: object, database: object
) -> None:
    callback = oidc.consent(oidc.start_login(client), "bob@example.com")
    client.cookies.clear()
    assert oidc.finish(client, callback).status_code == 400


def test_sign_in_rotates_the_session_and_logout_ends_it(client: TestClient) -> None:
    oidc.start_login(client)
    before = client.cookies.get("portal_session")
    oidc.sign_in(client, "bob@example.com")
    after = client.cookies.get("portal_session")
    assert before and after and before != after
    page = client.get("/", headers={"accept": "text/html"})
    csrf = csrf_of(page.text)
    assert client.post("/auth/logout", data={"csrf_token": csrf},
                       follow_redirects=False).status_code == 303
    client.cookies.set("portal_session", after)
    assert client.get("/api/v1/me").status_code == 401


def test_logout_without_the_csrf_token_is_refused(client: TestClient) -> None:
    oidc.sign_in(client, "bob@example.com")
    assert client.post("/auth/logout", data={}).status_code == 403
    assert client.get("/api/v1/me").status_code == 200


def test_next_cannot_redirect_off_site(client: TestClient) -> None:
    response = oidc.sign_in(client, "bob@example.com", next_path="//evil.example/steal")
    assert response.headers["location"] == "/"


def test_session_cookie_is_httponly_and_samesite(client: TestClient) -> None:
    oidc.start_login(client)
    response = oidc.finish(
        client, oidc.consent(oidc.start_login(client), "bob@example.com")
    )
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie


def test_an_unverified_email_does_not_take_over_a_pre_created_user(
    client: TestClient, oidc_issuer: str, db: Session
) -> None:
    invited = User(email="root@example.com", name="", admin_granted=True)
    db.add(invited)
    db.flush()
    factories.membership(db, factories.tenant(db, "demo-y"), invited, role="admin")
    db.commit()
    oidc.register_user(oidc_issuer, "mallory", email="root@example.com", email_verified=False)
    oidc.sign_in(client, "mallory")
    me = client.get("/api/v1/me").json()
    assert me["id"] != invited.id
    assert (me["platform_admin"], me["memberships"]) == (False, [])
    db.refresh(invited)
    assert invited.subject is None
