"""After a form is sent, the address is the page shown: every state-changing web route, sent
as a plain form post and over htmx by a caller allowed to, answers with a navigation (a 303, or
``HX-Redirect``) or, over htmx, with a part of the page the form sits on. A route that shows a
whole page where the form was posted (reloading it posts again, the address names no page) is
listed below with its reason, or this fails."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient

from app.auth.sessions import PLAIN_COOKIE
from tests.authz.route_access import ROUTES, Route
from tests.authz.world import World

pytestmark = pytest.mark.spread

FORM_POSTS = [r for r in ROUTES if r.method == "POST" and not r.path.startswith("/api/")]

# Plain form posts answered with a page of their own, and why no redirect can do instead.
SHOWN_WHERE_POSTED = {
    "/tokens": "the new token's secret, shown once on the tokens page: the portal keeps none",
    "/cli/login": "the hand-off page that passes the new token to the waiting portalctl",
    "/t/{tenant}/clusters/validate": "checks a form being filled in; never a form's action",
    "/t/{tenant}/quota-requests/validate": "checks a form being filled in; never a form's action",
    "/admin/tenants/{tenant}/burst-policy/check": (
        "checks a form being filled in; never a form's action"),
    "/t/{tenant}/clusters/{cluster}/sleep-policy/check": (
        "checks a form being filled in; never a form's action"),
    "/admin/fleet/suggest": "a question, not a change: the suggestion is shown where asked",
    "/t/{tenant}/webhooks": "the new webhook's signing secret, shown once: the portal shows "
                            "it no more",
    "/t/{tenant}/webhooks/{endpoint_id}/roll-secret": "the rolled secret, shown once",
    "/admin/webhooks": "the new webhook's signing secret, shown once: the portal shows it no more",
    "/admin/webhooks/{endpoint_id}/roll-secret": "the rolled secret, shown once",
}
# Forms without hx-post: a plain 303 is what the browser gets, htmx or not.
PLAIN_FORMS = {"/auth/logout"}


def send(client: TestClient, world: World, route: Route, *, htmx: bool) -> httpx.Response:
    world.current = "platform_admin"
    caller = world.callers["platform_admin"]
    client.cookies.set(PLAIN_COOKIE, caller.cookie or "")
    headers = {"accept": "text/html", "x-csrf-token": caller.csrf}
    if htmx:
        headers["hx-request"] = "true"
    response: httpx.Response = client.request(
        route.method, route.path.format(**route.params(world)), headers=headers,
        data=route.body(world) if route.body else None, follow_redirects=False)
    return response


def is_download(response: httpx.Response) -> bool:
    return not response.headers.get("content-type", "").startswith("text/html")


def test_the_lists_name_routes_that_exist() -> None:
    posted = {r.path for r in FORM_POSTS}
    assert set(SHOWN_WHERE_POSTED) - posted == set()
    assert PLAIN_FORMS - posted == set()


@pytest.mark.parametrize("route", FORM_POSTS, ids=lambda r: r.path)
def test_a_plain_form_post_lands_on_the_page_shown(
    matrix_client: TestClient, world: World, route: Route
) -> None:
    response = send(matrix_client, world, route, htmx=False)
    assert response.status_code < 400, response.text[:300]
    if route.path in SHOWN_WHERE_POSTED or is_download(response):
        return
    assert response.status_code == 303, (
        f"{route.path} answered a plain post with {response.status_code} and a page, at the "
        "address it was posted to: answer with app.web.forms.go_to(the page shown)")
    assert response.headers["location"].startswith("/")


@pytest.mark.parametrize("route", FORM_POSTS, ids=lambda r: r.path)
def test_an_htmx_form_post_navigates_or_answers_a_part_of_its_page(
    matrix_client: TestClient, world: World, route: Route
) -> None:
    response = send(matrix_client, world, route, htmx=True)
    assert response.status_code < 400, response.text[:300]
    if route.path in SHOWN_WHERE_POSTED or is_download(response):
        return
    if route.path in PLAIN_FORMS:
        assert response.status_code == 303
        return
    # A redirect followed inside htmx would swap another page in, under the old address.
    assert response.status_code != 303, f"{route.path}: use go_to, which says HX-Redirect"
    if "hx-redirect" in response.headers:
        assert response.headers["hx-redirect"].startswith("/")
        return
    assert "<html" not in response.text.lower(), (
        f"{route.path} answered htmx with a whole page, shown under the form's address: "
        "answer a part of the form's page, or go_to the page shown")
