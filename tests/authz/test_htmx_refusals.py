"""A refusal of a page's htmx request is told on the page (issue 58, item 11). htmx swaps no
error answer (base.html's ``responseHandling``), so a 403 problem alone left the button
doing nothing; its ``HX-Trigger`` names a toast that says why, on every web state change a
viewer may not make."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from app.auth.sessions import PLAIN_COOKIE
from tests.authz.route_access import ROUTES, Access, Route
from tests.authz.world import World

REFUSED_TO_VIEWERS = [r for r in ROUTES if r.method != "GET" and not r.path.startswith("/api/")
                      and r.access in (Access.TENANT_MEMBER, Access.TENANT_ADMIN,
                                       Access.PLATFORM_ADMIN)]


@pytest.mark.parametrize("route", REFUSED_TO_VIEWERS, ids=lambda r: f"{r.method} {r.path}")
def test_an_htmx_request_refused_says_why_in_a_toast(
        matrix_client: TestClient, world: World, route: Route) -> None:
    world.current = "acme_viewer"
    viewer = world.callers["acme_viewer"]
    matrix_client.cookies.set(PLAIN_COOKIE, viewer.cookie or "")
    answer = matrix_client.request(
        route.method, route.path.format(**route.params(world)),
        headers={"hx-request": "true", "accept": "*/*", "x-csrf-token": viewer.csrf},
        data=route.body(world) if route.body else None, follow_redirects=False)
    assert answer.status_code == 403, answer.text[:300]
    toast = json.loads(answer.headers["HX-Trigger"])["toast"]["message"]
    assert toast == answer.json()["detail"] and toast
