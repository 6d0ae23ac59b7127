"""The API's refusals are the portal's sentences on every route that takes a JSON body
(issue 58, items 10 and 11): no Pydantic prefix ("Value error, ...") before a validator's
sentence, and a body that does not parse is said to be no JSON rather than listed as a field
named after the character where parsing stopped. portalctl prints these messages as they
come, so this is what its errors say too."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.authz.route_access import ROUTES, Route
from tests.authz.world import World

JSON_ROUTES = [r for r in ROUTES if r.body is not None and r.path.startswith("/api/")]
# Bodies with a value to spoil (a template upgrade's {} has none).
SPOILABLE = [r for r in JSON_ROUTES if r.path != (
    "/api/v1/tenants/{tenant}/clusters/{cluster}/template-upgrade")]
# A character every single-line text field refuses with a validator's own sentence.
REFUSED = "x\u202e"
# Pydantic's "Value error, " and "Assertion failed, ", and any like them.
PREFIXED = re.compile(r"^[A-Z][a-z]+ (error|failed), ")


def _spoiled(value: Any) -> Any:
    """Every text of a valid body spoiled, and every number made text."""
    if isinstance(value, dict):
        return {k: _spoiled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_spoiled(v) for v in value]
    return REFUSED if isinstance(value, str | int) and not isinstance(value, bool) else value


def _path(route: Route, world: World) -> str:
    return route.path.format(**route.params(world))


@pytest.mark.parametrize("route", SPOILABLE, ids=lambda r: f"{r.method} {r.path}")
def test_a_refused_body_is_said_without_librarys_prefix(
        matrix_client: TestClient, world: World, route: Route) -> None:
    assert route.body is not None
    answer = matrix_client.request(route.method, _path(route, world),
                                   headers=world.callers["platform_admin"].headers,
                                   json=_spoiled(route.body(world)))
    assert answer.status_code == 422, answer.text[:300]
    messages = [answer.json()["detail"], *(e["message"] for e in answer.json()["errors"])]
    assert [m for m in messages if PREFIXED.match(m)] == []


@pytest.mark.parametrize("route", JSON_ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_a_body_that_does_not_parse_is_said_to_be_no_json(
        matrix_client: TestClient, world: World, route: Route) -> None:
    answer = matrix_client.request(route.method, _path(route, world),
                                   headers={**world.callers["platform_admin"].headers,
                                            "content-type": "application/json"},
                                   content=b'{"gpus": 1,')
    assert answer.status_code == 422, answer.text[:300]
    problem = answer.json()
    assert problem["detail"] == "the request body is not valid JSON"
    assert [e["field"] for e in problem["errors"]] == ["body"]
    assert problem["errors"][0]["message"].startswith("not valid JSON: ")
