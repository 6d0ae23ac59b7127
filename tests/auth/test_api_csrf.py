"""The session cookie on /api/v1: a state change needs the session's CSRF header and must not
come from another site; reads and API tokens need neither."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.auth.sessions import PLAIN_COOKIE
from app.database.core import Database
from app.kit.config import Settings
from app.process.asgi import create_app
from app.quotas.models import QuotaRequest
from tests.authz.route_access import ROUTES, Route
from tests.authz.world import World
from tests.support.kube import InMemoryConnector

OWN_ORIGIN = "http://testserver"
EVIL = "https://evil.example"


@pytest.fixture
def client(settings: Settings, database: Database, world: World) -> Iterator[TestClient]:
    with TestClient(create_app(settings, database, kube=InMemoryConnector())) as test_client:
        test_client.cookies.set(PLAIN_COOKIE, world.callers["acme_admin"].cookie or "")
        yield test_client


def _cancel_url(world: World) -> str:
    return f"/api/v1/tenants/acme/quota-requests/{world.pending_request_id}/cancel"


def _state(db: Session, world: World) -> str:
    db.expire_all()
    state: str = db.scalars(select(QuotaRequest.state).where(
        QuotaRequest.id == world.pending_request_id)).one()
    return state


def _token(world: World) -> dict[str, str]:
    return {"x-csrf-token": world.callers["acme_admin"].csrf}


def _assert_refused(response: httpx.Response) -> None:
    assert response.status_code == 403, response.text
    assert response.headers["content-type"] == "application/problem+json"


def test_a_cookie_write_without_the_csrf_header_is_refused_and_audited(
    client: TestClient, world: World, db: Session
) -> None:
    response = client.post(_cancel_url(world))
    _assert_refused(response)
    assert "X-CSRF-Token" in response.json()["detail"]
    assert _state(db, world) == "pending"
    denial = db.scalars(select(AuditEvent).where(AuditEvent.action == "authz.denied")).one()
    assert denial.actor_label == "acme_admin@example.com"
    assert denial.target_id == f"POST {_cancel_url(world)}"


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x"])
def test_preflight_free_posts_with_the_cookie_are_refused(
    client: TestClient, world: World, db: Session, content_type: str
) -> None:
    """What a page on another site can send without CORS asking first, the body included."""
    body = "--x--\r\n" if content_type.startswith("multipart") else "csrf_token=x"
    response = client.post(_cancel_url(world), content=body,
                           headers={"content-type": content_type, "origin": EVIL})
    _assert_refused(response)
    assert _state(db, world) == "pending"


@pytest.mark.parametrize("headers", [
    {"origin": EVIL},
    {"origin": "null"},
    {"origin": "http://testserver.evil.example"},
    {"sec-fetch-site": "cross-site"},
    {"sec-fetch-site": "same-site"},
], ids=["foreign", "opaque", "look-alike", "cross-site", "same-site"])
def test_a_cookie_write_from_another_site_is_refused_even_with_the_token(
    client: TestClient, world: World, db: Session, headers: dict[str, str]
) -> None:
    response = client.post(_cancel_url(world), headers={**_token(world), **headers})
    _assert_refused(response)
    assert "another site" in response.json()["detail"]
    assert _state(db, world) == "pending"


def test_a_cookie_write_from_the_portal_itself_is_accepted(
    client: TestClient, world: World, db: Session
) -> None:
    response = client.post(_cancel_url(world), headers={
        **_token(world), "origin": OWN_ORIGIN, "sec-fetch-site": "same-origin"})
    assert response.status_code == 200, response.text
    assert _state(db, world) == "cancelled"


def test_a_cookie_write_with_the_token_and_no_origin_is_accepted(
    client: TestClient, world: World
) -> None:
    created = client.post("/api/v1/tenants/acme/quota-requests", headers=_token(world), json={
        "gpu_class_id": world.gpu_class_id, "region": "eu-west", "gpus": 1, "reason": "eval"})
    assert created.status_code == 201, created.text


def test_the_configured_public_origin_is_the_portals_own(
    settings: Settings, database: Database, world: World, db: Session
) -> None:
    """Behind a proxy that renames the Host, the browser's Origin is the public URL's."""
    public = settings.model_copy(update={"base_url": "https://portal.example.com/"})
    with TestClient(create_app(public, database, kube=InMemoryConnector())) as client:
        client.cookies.set(PLAIN_COOKIE, world.callers["acme_admin"].cookie or "")
        response = client.post(_cancel_url(world), headers={
            **_token(world), "origin": "https://portal.example.com"})
    assert response.status_code == 200, response.text
    assert _state(db, world) == "cancelled"


def test_cookie_reads_need_no_token(client: TestClient, world: World) -> None:
    response = client.get("/api/v1/tenants/acme/quota-requests", headers={"origin": EVIL})
    assert response.status_code == 200


def test_bearer_token_writes_need_no_csrf_header_from_any_origin(
    client: TestClient, world: World, db: Session
) -> None:
    """The token is sent on purpose, by a script; a cookie beside it changes nothing."""
    headers = {**world.callers["acme_admin"].headers, "origin": EVIL,
               "sec-fetch-site": "cross-site", "content-type": "text/plain"}
    response = client.post(_cancel_url(world), headers=headers)
    assert response.status_code == 200, response.text
    assert _state(db, world) == "cancelled"


def test_html_forms_from_another_site_are_refused_even_with_the_token(
    client: TestClient, world: World, db: Session
) -> None:
    url = f"/t/acme/quota-requests/{world.pending_request_id}/cancel"
    fields = {"csrf_token": world.callers["acme_admin"].csrf}
    forged = client.post(url, data=fields, headers={"origin": EVIL, "accept": "text/html"},
                         follow_redirects=False)
    assert forged.status_code == 403
    assert _state(db, world) == "pending"
    own = client.post(url, data=fields, headers={"origin": OWN_ORIGIN, "accept": "text/html"},
                      follow_redirects=False)
    assert own.status_code < 400, own.text
    assert _state(db, world) == "cancelled"


API_STATE_CHANGES = [r for r in ROUTES if r.method != "GET" and r.path.startswith("/api/")]


@pytest.mark.parametrize("route", API_STATE_CHANGES, ids=lambda r: f"{r.method} {r.path}")
def test_every_api_state_change_refuses_the_bare_cookie(
    client: TestClient, world: World, db: Session, route: Route
) -> None:
    """A platform admin's browser, made to send each write without the header: nothing moves."""
    world.current = "platform_admin"
    client.cookies.set(PLAIN_COOKIE, world.callers["platform_admin"].cookie or "")
    changes = select(AuditEvent.id).where(AuditEvent.action != "authz.denied")
    before = db.scalars(changes).all()
    response = client.request(route.method, route.path.format(**route.params(world)),
                              json=route.body(world) if route.body else None)
    _assert_refused(response)
    assert db.scalars(changes).all() == before
