"""Reading writes nothing: every GET route, called again by a caller it answers (a bearer
token on the API, a browser session on the pages), sends no INSERT, UPDATE or DELETE.

The first call may note what is kept to the minute (a token's last use, a session's last
visit); the test asserts on the one after it.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.database.core import Database
from tests.authz.route_access import ROUTES, Route
from tests.authz.test_route_matrix import allowed, call
from tests.authz.world import World
from tests.support.sql import statements_during, writes

# many short tests, each with a world of its own: dealt out singly in a parallel run
pytestmark = pytest.mark.spread

# Signing in and out is what writes a session; everything else only reads.
# /metrics answers a scraper's token, no user's: tests/http/test_metrics.py reads it twice.
READS = [r for r in ROUTES if r.method == "GET" and not r.path.startswith("/auth/")
         and r.path != "/metrics"]


@pytest.mark.parametrize("principal", ["platform_admin", "acme_member"])
@pytest.mark.parametrize("route", READS, ids=lambda r: r.path)
def test_a_second_read_writes_nothing(matrix_client: TestClient, world: World,
                                      database: Database, route: Route,
                                      principal: str) -> None:
    if not allowed(route, principal):
        pytest.skip("refusals are audited: a write by design")
    world.current = principal
    caller = world.callers[principal]
    first = call(matrix_client, route, world, caller)
    assert first.status_code < 400, first.text[:300]
    seen = statements_during(database, lambda: call(matrix_client, route, world, caller))
    assert writes(seen) == []
