"""The app tries the most requested routers first (``app.process.asgi.HOT_ROUTERS``); that may only
change how fast a request finds its route, never which route it finds."""

from __future__ import annotations

import re

import pytest
from fastapi.routing import APIRoute

from app.process.asgi import all_routers

# What a path parameter may be in a request: an id, a slug, or a word that is also a literal
# segment somewhere (``/clusters/new``, ``/nodes/suggest``).
SAMPLES = ("1", "acme", "new", "validate", "suggest", "current", "assignment")


def _paths(template: str) -> set[str]:
    return {re.sub(r"\{[^}]+\}", sample, template) for sample in SAMPLES}


def test_no_path_reaches_routes_of_two_routers() -> None:
    routes = [(index, route) for index, router in enumerate(all_routers())
              for route in router.routes if isinstance(route, APIRoute)]
    assert len(routes) == sum(len(router.routes) for router in all_routers())
    shared = [(route.path, other.path, path)
              for index, route in routes for path in _paths(route.path)
              for other_index, other in routes
              if other_index != index and other.path_regex.match(path)]
    assert shared == []


@pytest.mark.parametrize("path", ["/api/v1/tenants/{tenant}/clusters", "/t/{tenant}"])
def test_the_hottest_routes_come_early(path: str) -> None:
    """Else FastAPI tries every route before them on every request."""
    paths = [route.path for router in all_routers() for route in router.routes
             if isinstance(route, APIRoute)]
    assert paths.index(path) < 40
