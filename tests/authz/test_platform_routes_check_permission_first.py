"""A platform-only route refuses everyone else before it reads the body (issue 53, item 4).

Otherwise a tenant admin sending ``{}`` learns the route's fields from a 422. A route declares
itself platform-only with ``app.authz.routes.PLATFORM_WRITE``, a dependency, which FastAPI
runs before it validates the body. The routes walked here are found in the app by that
declaration, and must be every platform-only state change ``route_access.ROUTES`` lists (a
table ``test_route_matrix`` holds to the app's own routes and to what each caller gets).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.auth.sessions import PLAIN_COOKIE
from app.authz.routes import platform_writer
from app.process.asgi import all_routers
from tests.authz.route_access import ROUTES, Access, Route
from tests.authz.world import Caller, World
from tests.support.principals import bearer


def _depends_on_platform_writer(dependant: Dependant) -> bool:
    return any(sub.call is platform_writer or _depends_on_platform_writer(sub)
               for sub in dependant.dependencies)


def declared_platform_only() -> set[tuple[str, str]]:
    """From the app's routes: those that declare themselves platform-only."""
    return {(method, route.path) for router in all_routers() for route in router.routes
            if isinstance(route, APIRoute) and _depends_on_platform_writer(route.dependant)
            for method in route.methods or ()}


PLATFORM_CHANGES = [r for r in ROUTES if (r.method, r.path) in declared_platform_only()]


def test_every_platform_only_change_declares_it_on_its_route() -> None:
    listed = {(r.method, r.path) for r in ROUTES
              if r.access is Access.PLATFORM_ADMIN and r.method != "GET"}
    assert sorted(listed - declared_platform_only()) == []
    assert sorted(declared_platform_only() - listed) == []

# Bodies that fail any of the routes' schemas, or that a route would accept.
JSON_BODIES: dict[str, Any] = {
    "no body": None,
    "empty object": {},
    "wrong types": {"name": 7, "gpus": "many", "bmc": [], "scopes": {}, "tier": None},
    "a list": [1, 2],
}
FORM_BODIES: dict[str, dict[str, str] | None] = {
    "no fields": None,
    "junk fields": {"name": "", "gpus": "many", "gpu_count": "-1", "state": "???"},
}


def _bodies(route: Route) -> dict[str, Any]:
    return JSON_BODIES if route.path.startswith("/api/") else FORM_BODIES


def _callers(world: World, db: Session, route: Route) -> dict[str, Caller]:
    """Everyone but a platform admin; on the API also a platform admin's read-only token."""
    callers = {name: world.callers[name] for name in ("acme_admin", "acme_member", "outsider")}
    if route.path.startswith("/api/"):
        admin = world.users["platform_admin"]
        callers["platform admin, read-only"] = Caller(user=admin,
                                                      headers=bearer(db, admin, "read"))
        db.commit()
    return callers


@pytest.mark.parametrize("route", PLATFORM_CHANGES, ids=lambda r: f"{r.method} {r.path}")
def test_a_platform_only_route_refuses_others_whatever_the_body(
    matrix_client: TestClient, world: World, route: Route, db: Session
) -> None:
    path = route.path.format(**route.params(world))
    callers = _callers(world, db, route)
    for (caller, who), (name, body) in itertools.product(callers.items(),
                                                         _bodies(route).items()):
        if route.path.startswith("/api/"):
            response = matrix_client.request(route.method, path, headers=who.headers,
                                             json=body)
        else:
            matrix_client.cookies.set(PLAIN_COOKIE, who.cookie or "")
            response = matrix_client.request(
                route.method, path, data=body, follow_redirects=False,
                headers={"accept": "text/html", "x-csrf-token": who.csrf})
        assert response.status_code == 403, (
            f"{caller}, {name}: {response.status_code} {response.text[:200]}")
