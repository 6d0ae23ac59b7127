"""Every route of the app, walked by every kind of caller.

The route list comes from the app itself, so a new route without an entry in
``route_access.ROUTES`` fails ``test_every_route_has_an_access_entry``.
"""

from __future__ import annotations

import httpx
import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starlette.routing import Mount
from starlette.routing import Route as StarletteRoute

from app.audit.models import AuditEvent
from app.auth.sessions import PLAIN_COOKIE
from app.database.core import Database
from app.kit.config import Settings
from app.process.asgi import all_routers, create_app
from tests.authz.route_access import ROUTES, Access, Route
from tests.authz.world import PRINCIPALS, Caller, World

# many short tests, each with a world of its own: dealt out singly in a parallel run
pytestmark = pytest.mark.spread

TENANT_ROLES = {
    Access.TENANT_VIEWER: {"acme_viewer", "acme_member", "acme_admin"},
    Access.TENANT_MEMBER: {"acme_member", "acme_admin"},
    Access.TENANT_ADMIN: {"acme_admin"},
}
OUTSIDERS_OF_ACME = {"outsider", "globex_admin"}


def app_routes(settings: Settings) -> set[tuple[str, str]]:
    """The app's own routes plus those of every router it includes."""
    app = create_app(settings, Database("sqlite://"))
    top_level = [r for r in app.routes if isinstance(r, StarletteRoute)]
    included = [r for r in app.routes if not isinstance(r, StarletteRoute | Mount)]
    # Every router the app includes must come from all_routers(), or the walk below misses it.
    assert len(included) == len(all_routers())
    routes = top_level + [r for router in all_routers() for r in router.routes]
    found: set[tuple[str, str]] = set()
    for route in routes:
        assert isinstance(route, APIRoute | StarletteRoute)
        found.update((method, route.path) for method in route.methods or () if method != "HEAD")
    return found


def test_every_route_has_an_access_entry(settings: Settings) -> None:
    declared = {(r.method, r.path) for r in ROUTES}
    assert sorted(app_routes(settings) - declared) == []
    assert sorted(declared - app_routes(settings)) == []


def allowed(route: Route, principal: str) -> bool:
    if route.access is Access.PUBLIC:
        return True
    if principal == "anonymous":
        return False
    if route.access is Access.SIGNED_IN or principal == "platform_admin":
        return True
    if route.access is Access.PLATFORM_ADMIN:
        return False
    if route.access is Access.ANY_TENANT_ADMIN:
        return principal in {"acme_admin", "globex_admin"}
    return principal in TENANT_ROLES[route.access]


def expected_refusals(route: Route, principal: str) -> set[int]:
    if principal == "anonymous":
        return {401} if route.path.startswith("/api/") else {303}
    if route.access in TENANT_ROLES and principal in OUTSIDERS_OF_ACME:
        return {404}
    return {403}


def _state_changes(db: Session) -> int:
    """Every state change is audited, so audit rows other than denials count them."""
    return db.scalar(select(func.count()).select_from(AuditEvent).where(
        AuditEvent.action != "authz.denied")) or 0


def call(client: TestClient, route: Route, world: World, caller: Caller) -> httpx.Response:
    path = route.path.format(**route.params(world))
    headers = {"accept": "application/json"}
    if route.path.startswith("/api/"):
        headers.update(caller.headers)
    else:
        headers["accept"] = "text/html"
        if caller.cookie:
            client.cookies.set(PLAIN_COOKIE, caller.cookie)
            headers["x-csrf-token"] = caller.csrf
    body = route.body(world) if route.body else None
    as_json = route.path.startswith("/api/")
    response: httpx.Response = client.request(
        route.method, path, headers=headers, follow_redirects=False,
        json=body if as_json else None, data=None if as_json else body,
    )
    return response


@pytest.mark.parametrize("principal", PRINCIPALS)
@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_route_answers_each_caller_as_declared(
    matrix_client: TestClient, world: World, route: Route, principal: str, db: Session
) -> None:
    world.current = principal
    changes_before = _state_changes(db)
    response = call(matrix_client, route, world, world.callers[principal])
    if route.method == "GET" and not route.path.startswith("/auth/"):
        assert _state_changes(db) == changes_before, "a GET changed state"
    if allowed(route, principal):
        assert response.status_code < 400 or response.status_code in route.also_ok, (
            f"{principal} should be allowed: {response.status_code} {response.text[:300]}"
        )
    else:
        assert response.status_code in expected_refusals(route, principal), (
            f"{principal} should be refused: {response.status_code} {response.text[:300]}"
        )


WEB_STATE_CHANGES = [r for r in ROUTES if r.method != "GET" and not r.path.startswith("/api/")]


@pytest.mark.parametrize("route", WEB_STATE_CHANGES, ids=lambda r: f"{r.method} {r.path}")
def test_every_web_state_change_needs_the_csrf_token(
    matrix_client: TestClient, world: World, route: Route, db: Session
) -> None:
    """A signed-in platform admin's browser, tricked into posting without the token: 403."""
    world.current = "platform_admin"
    caller = world.callers["platform_admin"]
    matrix_client.cookies.set(PLAIN_COOKIE, caller.cookie or "")
    changes_before = _state_changes(db)
    response = matrix_client.request(
        route.method, route.path.format(**route.params(world)),
        headers={"accept": "text/html", "origin": "https://evil.example"},
        data=route.body(world) if route.body else None, follow_redirects=False,
    )
    assert response.status_code == 403, response.text[:300]
    assert _state_changes(db) == changes_before
