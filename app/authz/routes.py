"""Who may call a route, declared on the route and checked before it reads its body.

FastAPI runs a route's dependencies before it validates the body, while a check made in the
service runs after: a platform-only route that left the check to its service answered a
tenant admin's ``{}`` with a 422 naming the fields it wants. ``tests/authz`` finds the
platform-only routes by this declaration and sends each one bodies of every kind.
"""

from __future__ import annotations

from fastapi import Depends, Request

from app.auth.csrf import STATE_CHANGING
from app.auth.deps import require_principal
from app.authz.scoping import ensure_platform_writer


async def platform_writer(request: Request) -> None:
    ensure_platform_writer(await require_principal(request))


# For the REST API's platform-only changes, and the pages' (after the browser's CSRF check).
PLATFORM_WRITE = [Depends(platform_writer)]
PLATFORM_STATE_CHANGING = [*STATE_CHANGING, *PLATFORM_WRITE]
