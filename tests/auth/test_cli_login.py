"""The portal's side of `portalctl login` in a browser: the confirm page and the handoff."""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import parse_qs, urlsplit

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.auth.models import ApiToken
from tests.support import oidc
from tests.support.web import HTML, csrf_of

STATE = "s" * 43
ASK = {"port": "54321", "state": STATE, "name": "portalctl on laptop", "expires_in_days": "7"}


def test_a_visitor_is_sent_through_sso_and_back_with_the_whole_request(
    client: TestClient,
) -> None:
    response = client.get("/cli/login", params=ASK, headers=HTML, follow_redirects=False)
    assert response.status_code == 303
    location = urlsplit(response.headers["location"])
    assert location.path == "/auth/login"
    back = parse_qs(location.query)["next"][0]
    assert urlsplit(back).path == "/cli/login"
    assert parse_qs(urlsplit(back).query) == {k: [v] for k, v in ASK.items()}
    signed_in = oidc.sign_in(client, "alice@example.com", next_path=back)
    assert signed_in.headers["location"] == back


def test_the_page_shows_the_token_to_be_made_and_makes_it_only_when_confirmed(
    client: TestClient, db: Session
) -> None:
    oidc.sign_in(client, "alice@example.com")
    page = client.get("/cli/login", params=ASK, headers=HTML)
    assert page.status_code == 200
    text = unescape(page.text)
    assert "portalctl on laptop" in text and "read, write" in text and "in 7 days" in text
    assert "http://127.0.0.1:54321/callback" in text
    assert db.scalars(select(ApiToken)).all() == []

    without_csrf = client.post("/cli/login", data={**ASK, "decision": "create"}, headers=HTML)
    assert without_csrf.status_code == 403

    handed = client.post("/cli/login", headers=HTML,
                         data={**ASK, "decision": "create", "csrf_token": csrf_of(page.text)})
    assert handed.status_code == 200
    assert handed.headers["cache-control"] == "no-store"
    policy = handed.headers["content-security-policy"]
    assert "form-action 'self' http://127.0.0.1:54321;" in policy + ";"
    assert "script-src 'self'" in policy
    fields = _handoff_fields(handed.text)
    assert fields["action"] == "http://127.0.0.1:54321/callback"
    assert fields["state"] == STATE and fields["token"].startswith("gtp_")

    token = db.scalars(select(ApiToken)).one()
    assert (token.name, token.scopes) == ("portalctl on laptop", ["read", "write"])
    assert token.expires_at is not None
    me = client.get("/api/v1/me", headers={"Authorization": f"Bearer {fields['token']}"})
    assert me.json()["email"] == "alice@example.com"
    event = db.scalars(select(AuditEvent).where(AuditEvent.action == "api_token.create")).one()
    assert fields["token"] not in str(event.after)


def test_a_platform_admin_gets_the_admin_scope(client: TestClient, db: Session) -> None:
    oidc.sign_in(client, "admin@example.com")
    page = client.get("/cli/login", params=ASK, headers=HTML)
    assert "read, write, admin" in page.text
    client.post("/cli/login", headers=HTML,
                data={**ASK, "decision": "create", "csrf_token": csrf_of(page.text)})
    assert db.scalars(select(ApiToken)).one().scopes == ["admin", "read", "write"]


def test_cancelling_tells_the_listener_and_makes_no_token(
    client: TestClient, db: Session
) -> None:
    oidc.sign_in(client, "alice@example.com")
    csrf = csrf_of(client.get("/cli/login", params=ASK, headers=HTML).text)
    handed = client.post("/cli/login", headers=HTML,
                         data={**ASK, "decision": "cancel", "csrf_token": csrf})
    fields = _handoff_fields(handed.text)
    assert (fields["state"], fields["error"]) == (STATE, "cancelled")
    assert "token" not in fields
    assert db.scalars(select(ApiToken)).all() == []


def test_a_bad_port_or_state_is_refused_before_anything_is_made(
    client: TestClient, db: Session
) -> None:
    oidc.sign_in(client, "alice@example.com")
    csrf = csrf_of(client.get("/cli/login", params=ASK, headers=HTML).text)
    for bad in ({"port": "80"}, {"port": "65536"}, {"port": "12ab"}, {"port": ""},
                {"state": "short"}, {"state": STATE + "/@evil"}, {"expires_in_days": "999"},
                {"name": "two\nlines"}):
        page = client.get("/cli/login", params={**ASK, **bad}, headers=HTML)
        assert page.status_code == 422, bad
        # A control character is refused by the guard in front of every route.
        assert "not valid" in page.text or "control character" in page.text
        assert "/callback" not in page.text
        posted = client.post("/cli/login", headers=HTML,
                             data={**ASK, **bad, "decision": "create", "csrf_token": csrf})
        assert posted.status_code == 422, bad
    assert db.scalars(select(ApiToken)).all() == []


def test_the_page_opened_by_hand_says_how_to_start_from_the_terminal(
    client: TestClient,
) -> None:
    oidc.sign_in(client, "alice@example.com")
    page = client.get("/cli/login", headers=HTML)
    assert page.status_code == 200
    assert "portalctl login --url http://testserver" in page.text
    assert "Create token" not in page.text


def test_a_token_cannot_stand_in_for_the_browser(client: TestClient, db: Session) -> None:
    oidc.sign_in(client, "alice@example.com")
    csrf = csrf_of(client.get("/cli/login", params=ASK, headers=HTML).text)
    handed = client.post("/cli/login", headers=HTML,
                         data={**ASK, "decision": "create", "csrf_token": csrf})
    token = _handoff_fields(handed.text)["token"]
    client.cookies.clear()
    refused = client.get("/cli/login", params=ASK,
                         headers={**HTML, "Authorization": f"Bearer {token}"})
    assert refused.status_code == 403
    assert len(db.scalars(select(ApiToken)).all()) == 1


def _handoff_fields(page: str) -> dict[str, str]:
    action = re.search(r'<form[^>]* method="post" action="([^"]+)" id="cli-handoff"', page)
    assert action, page
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page))
    return {"action": action.group(1), **{k: unescape(v) for k, v in fields.items()}}
