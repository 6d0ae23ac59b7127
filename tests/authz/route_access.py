"""Who may call each route: the table the authorization matrix test walks.

Every route of the app needs an entry here; a route without one fails the matrix test.
Path parameters are filled from the ``World`` the matrix test builds (tenant ``acme`` with a
viewer, a member and an admin; tenant ``globex`` with its own admin; a platform admin), via
``params``: a function from the world to the path values. ``body`` is a valid JSON body (or
form fields for web routes, which also get the CSRF token), so that an allowed caller reaches
the service rather than failing validation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.authz.world import World


class Access(Enum):
    PUBLIC = "anyone, signed in or not"
    SIGNED_IN = "any signed-in user"
    TENANT_VIEWER = "viewer, member or admin of the tenant, or a platform admin"
    TENANT_MEMBER = "member or admin of the tenant, or a platform admin"
    TENANT_ADMIN = "admin of the tenant, or a platform admin"
    PLATFORM_ADMIN = "platform admins only"


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    access: Access
    params: Callable[[World], dict[str, Any]] = field(default=lambda _world: {})
    body: Callable[[World], dict[str, Any]] | None = None
    # Statuses an allowed caller may get besides 2xx/3xx (e.g. 409 for a second approval).
    also_ok: tuple[int, ...] = ()


def acme(world: World) -> dict[str, Any]:
    return {"tenant": "acme"}


ROUTES: list[Route] = [
    Route("GET", "/", Access.PUBLIC),
    Route("GET", "/healthz", Access.PUBLIC),
    Route("GET", "/readyz", Access.PUBLIC),
    Route("GET", "/auth/login", Access.PUBLIC),
    Route("GET", "/auth/callback", Access.PUBLIC, also_ok=(400,)),
    # Anonymous callers have no session, hence no CSRF token to send: 403.
    Route("POST", "/auth/logout", Access.PUBLIC, also_ok=(403,)),
    Route("GET", "/api/v1/me", Access.SIGNED_IN),
    Route("GET", "/openapi.json", Access.PUBLIC),
    Route("GET", "/docs", Access.PUBLIC),
    Route("GET", "/docs/oauth2-redirect", Access.PUBLIC),
    Route("GET", "/redoc", Access.PUBLIC),
]
