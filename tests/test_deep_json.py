"""A JSON body nested deeper than the parser reads is a 422 saying so, never a server error.

With or without a NUL inside (the guard parses a body that may hold one; FastAPI parses the
others), signed in or not; and over real HTTP the keep-alive connection carries the next
request, as after any other 422.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from app.database.core import Database
from app.http.middleware import READABLE_JSON_DEPTH, _unstorable_text
from app.kit.config import Settings
from app.process.asgi import create_app
from tests.authz.world import World
from tests.support.kube import InMemoryConnector
from tests.support.serving import serving

QUOTA_REQUESTS = "/api/v1/tenants/acme/quota-requests"
JSON = {"content-type": "application/json"}
NESTING = "nested too deeply"


def nested(depth: int, shape: str, text: str) -> str:
    """``text`` (a JSON string) inside ``depth`` arrays or objects."""
    if shape == "arrays":
        return "[" * depth + text + "]" * depth
    return '{"a":' * depth + text + "}" * depth


def quota_request(depth: int, shape: str, *, nul: bool) -> str:
    inner = nested(depth, shape, '"\\u0000"' if nul else '"text"')
    return f'{{"gpu_class_id":1,"gpus":1,"reason":{inner}}}'


@pytest.fixture
def roomy_settings(settings: Settings) -> Settings:
    """Room for 100,000 nested objects (600 kB): the nesting is under test, not the size."""
    return settings.model_copy(update={"max_body_bytes": 1 << 20})


@pytest.fixture
def client(roomy_settings: Settings, database: Database) -> Iterator[TestClient]:
    app = create_app(roomy_settings, database, kube=InMemoryConnector())
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.mark.parametrize("depth", [1_000, 10_000, 100_000])
@pytest.mark.parametrize("shape", ["arrays", "objects"])
@pytest.mark.parametrize("nul", [True, False], ids=["with NUL", "without NUL"])
@pytest.mark.parametrize("caller", ["anonymous", "acme_admin"])
def test_a_body_nested_too_deeply_is_a_422_saying_so(
        client: TestClient, world: World, depth: int, shape: str, nul: bool,
        caller: str) -> None:
    response = client.post(QUOTA_REQUESTS, content=quota_request(depth, shape, nul=nul),
                           headers={**JSON, **world.callers[caller].headers})
    assert response.status_code == 422, response.text[:300]
    assert response.headers["content-type"] == "application/problem+json"
    assert NESTING in response.json()["detail"]
    assert response.headers["x-frame-options"] == "DENY"


@pytest.mark.parametrize("shape", ["arrays", "objects"])
def test_a_body_nested_as_deep_as_the_portal_reads_is_read(
        client: TestClient, world: World, shape: str) -> None:
    caller = world.callers["acme_admin"].headers
    with_nul = client.post(QUOTA_REQUESTS, headers={**JSON, **caller},
                           content=quota_request(READABLE_JSON_DEPTH, shape, nul=True))
    assert with_nul.status_code == 422
    assert with_nul.json()["errors"][0]["message"] == "must not contain NUL U+0000"
    without = client.post(QUOTA_REQUESTS, headers={**JSON, **caller},
                          content=quota_request(READABLE_JSON_DEPTH, shape, nul=False))
    assert without.status_code == 422
    assert without.json()["errors"][0]["field"] == "reason"


@pytest.mark.parametrize("shape", ["arrays", "objects"])
def test_every_depth_around_the_parsers_limit_is_a_422(
        client: TestClient, world: World, shape: str) -> None:
    """Where the parser just manages, the guard's own walk through the document must too."""
    for depth in range(900, 1_101):
        response = client.post(QUOTA_REQUESTS, headers=JSON,
                               content=quota_request(depth, shape, nul=True))
        assert response.status_code == 422, f"{depth}: {response.text[:200]}"


def test_the_guards_walk_through_a_document_has_no_depth_limit_of_its_own() -> None:
    """Today the parser gives up first; the walk must not depend on that staying so."""
    document: object = "\x00"
    for _ in range(100_000):
        document = [document]
    assert _unstorable_text(document, ()) == (".".join(["0"] * 100_000), "\x00")


@pytest.mark.parametrize("nul", [True, False], ids=["with NUL", "without NUL"])
def test_the_connection_stays_open_after_a_body_nested_too_deeply(
        roomy_settings: Settings, database: Database, nul: bool) -> None:
    with serving(roomy_settings, database, InMemoryConnector()) as base, \
            httpx.Client(base_url=base) as http:
        refused = http.post(QUOTA_REQUESTS, content=quota_request(10_000, "arrays", nul=nul),
                            headers=JSON)
        assert refused.status_code == 422 and NESTING in refused.json()["detail"]
        after = http.get("/healthz")
        assert after.status_code == 200
        assert _local_address(after) == _local_address(refused)


def _local_address(response: httpx.Response) -> object:
    return response.extensions["network_stream"].get_extra_info("client_addr")
