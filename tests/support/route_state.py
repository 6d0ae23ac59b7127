"""One build of each route's state for all the apps a test process makes.

FastAPI builds an included route's state (its dependency tree, a pydantic adapter for every
parameter) for each app, on the app's first request that walks past the route. The suite makes
an app per test, and every one includes the same routers the same way: building them again
cost a tenth of a second and more per test: the route matrix ran three times slower. The state
of a route included the same way is the same, but for the app whose dependency overrides it
consults: an app with overrides gets states of its own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import routing

Built = tuple[Any, Any, Any]  # the route, how it was included, its state


def share_route_state_across_apps() -> None:
    included = routing._IncludedRouter  # FastAPI's lazy inclusion
    build = included._build_effective_context
    built: dict[int, list[Built]] = {}

    def shared(self: Any, route: Any) -> Any:
        app = self.include_context.dependency_overrides_provider
        if getattr(app, "dependency_overrides", None):
            return build(self, route)
        how = dataclasses.replace(self.include_context, dependency_overrides_provider=None)
        for seen, seen_how, state in built.get(id(route), ()):
            if seen is route and seen_how == how:
                return state
        state = build(self, route)
        built.setdefault(id(route), []).append((route, how, state))
        return state

    included._build_effective_context = shared  # type: ignore[method-assign]
