"""The API's reference: /docs and /redoc come from the portal itself (no CDN), and the OpenAPI
document describes every operation, how to sign in for it and the errors it can answer."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.kit.config import Settings
from app.process.asgi import create_app
from app.process.devmode import demo_users, local_oidc_app

HTTP_METHODS = {"get", "put", "post", "patch", "delete"}
SIGN_IN: list[dict[str, list[str]]] = [{"apiToken": []}, {"sessionCookie": []}]
PROBLEM = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}


@pytest.fixture
def portal(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture
def document(portal: TestClient) -> dict[str, Any]:
    found: dict[str, Any] = portal.get("/openapi.json").json()
    return found


def operations(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            if method in HTTP_METHODS:
                yield f"{method.upper()} {path}", operation


def test_every_operation_says_what_it_does(document: dict[str, Any]) -> None:
    undescribed = [
        name
        for name, operation in operations(document)
        if len(operation.get("description", "").strip()) < 20
    ]
    assert undescribed == []
    unnamed = [name for name, operation in operations(document) if not operation.get("summary")]
    assert unnamed == []


def test_every_api_operation_names_how_to_sign_in_and_its_401(document: dict[str, Any]) -> None:
    schemes = document["components"]["securitySchemes"]
    assert schemes["apiToken"]["type"] == "http"
    assert schemes["apiToken"]["scheme"] == "bearer"
    assert schemes["sessionCookie"] == {
        **schemes["sessionCookie"],
        "type": "apiKey",
        "in": "cookie",
        "name": "portal_session",
    }
    wrong = []
    for name, operation in operations(document):
        needs_caller = name.split(" ")[1].startswith("/api/")
        if needs_caller and (
            operation.get("security") != SIGN_IN or "401" not in operation["responses"]
        ):
            wrong.append(name)
        if not needs_caller and ("security" in operation or "401" in operation["responses"]):
            wrong.append(name)
    assert wrong == []


def test_every_error_answer_is_problem_json(document: dict[str, Any]) -> None:
    wrong = [
        f"{name} {status}"
        for name, operation in operations(document)
        for status, response in operation["responses"].items()
        if status.startswith("4") and response.get("content") != PROBLEM
    ]
    assert wrong == []
    assert "HTTPValidationError" not in document["components"]["schemas"]
    problem = document["components"]["schemas"]["Problem"]
    assert {"title", "status", "detail", "request_id"} <= set(problem["required"])


def test_operations_list_the_errors_they_can_give(document: dict[str, Any]) -> None:
    paths = document["paths"]
    approve = paths["/api/v1/quota-requests/{request_id}/approve"]["post"]["responses"]
    assert {"401", "403", "404", "409", "422"} <= set(approve)
    tenant_read = paths["/api/v1/tenants/{tenant}/clusters"]["get"]["responses"]
    assert "404" in tenant_read
    assert "403" not in tenant_read  # any role may read; a stranger gets the 404
    assert "403" in paths["/api/v1/host-clusters"]["get"]["responses"]


def test_a_request_the_docs_describe_gets_that_answer(
    portal: TestClient, document: dict[str, Any]
) -> None:
    unsigned = portal.get("/api/v1/me")
    assert unsigned.status_code == 401
    assert "401" in document["paths"]["/api/v1/me"]["get"]["responses"]
    assert unsigned.headers["content-type"] == "application/problem+json"
    assert set(unsigned.json()) >= {"title", "status", "detail", "request_id"}


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_reference_pages_load_only_the_portals_own_files(portal: TestClient, page: str) -> None:
    html = portal.get(page).text
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources
    assert all(source.startswith(("http://testserver/static/", "/")) for source in sources)
    for source in sources:
        assert portal.get(source).status_code == 200, source


def test_only_redocs_styles_may_be_inline(portal: TestClient) -> None:
    swagger = portal.get("/docs").headers["content-security-policy"]
    redoc = portal.get("/redoc").headers["content-security-policy"]
    assert "'unsafe-inline'" not in swagger
    assert "style-src 'self' 'unsafe-inline'" in redoc
    assert "script-src 'self';" in redoc
    assert "worker-src 'self' blob:" in redoc


def test_swagger_uis_oauth2_redirect_page_is_gone(portal: TestClient) -> None:
    assert portal.get("/docs/oauth2-redirect").status_code == 404


SIGN_IN_QUERY = {
    "client_id": "portal",
    "redirect_uri": "http://127.0.0.1:8000/auth/callback",
    "response_type": "code",
    "scope": "openid",
    "nonce": "n",
    "state": "s",
}


@pytest.mark.parametrize(
    ("query", "shows"),
    [
        (SIGN_IN_QUERY, "alice@example.com"),
        ({**SIGN_IN_QUERY, "response_type": "token"}, "Error: unsupported_response_type"),
    ],
    ids=["sign-in", "error"],
)
def test_the_local_idps_pages_style_themselves_without_a_cdn(
    query: dict[str, str], shows: str
) -> None:
    idp = local_oidc_app(demo_users("platform-admins")).test_client()
    html = idp.get("/oauth2/authorize", query_string=query).get_data(as_text=True)
    assert shows in html
    stylesheets = re.findall(r'<link[^>]*rel="stylesheet"[^>]*href="([^"]+)"', html)
    assert stylesheets == ["/static/vendor/pico-2.1.1.min.css"]
    css = idp.get(stylesheets[0])
    assert css.status_code == 200
    assert css.content_type.startswith("text/css")
    assert b"--pico-" in css.data
