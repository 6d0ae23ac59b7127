"""CSRF: a per-session token that every cookie-authenticated state change must echo.

Forms send it as ``csrf_token``; htmx sends it as the ``X-CSRF-Token`` header set through
``hx-headers`` on ``<body>``; cookie-authenticated ``/api/v1`` calls must send the header.
Bearer-token requests carry no ambient credential and skip it. A state change that a browser
says comes from another site (``Origin``, ``Sec-Fetch-Site``) is refused even with the token.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from fastapi import Depends, Request

from app.auth.deps import optional_principal, require_principal
from app.kit.errors import Forbidden

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_OWN_SITE = frozenset({"same-origin", "none"})


async def verify_csrf(request: Request) -> None:
    if request.method in SAFE_METHODS:
        return
    if request.headers.get("authorization", "").lower().startswith("bearer "):
        return
    _refuse_cross_site(request)
    expected = request.session.get("csrf") if "session" in request.scope else None
    sent = request.headers.get("x-csrf-token")
    if sent is None and _is_form(request):
        sent = str((await request.form()).get("csrf_token") or "")
    if not expected or not sent or not hmac.compare_digest(expected, sent):
        raise Forbidden("missing or wrong CSRF token; reload the page and try again")


async def verify_api_csrf(request: Request) -> None:
    """API state changes signed in by the session cookie: same origin, token in the header.

    Why the header only: a cross-site page can post a form or ``text/plain`` without a CORS
    preflight, and ``SameSite=Lax`` would then be the cookie's only barrier.
    """
    principal = await optional_principal(request)  # resolved here for the endpoint too
    if request.method in SAFE_METHODS or principal is None or principal.via != "session":
        return
    _refuse_cross_site(request)
    expected = request.session.get("csrf")
    sent = request.headers.get("x-csrf-token")
    if not expected or not sent or not hmac.compare_digest(expected, sent):
        raise Forbidden("a state change signed in by the session cookie needs the "
                        "X-CSRF-Token header of the session; scripts should send an API token")


def _refuse_cross_site(request: Request) -> None:
    site = request.headers.get("sec-fetch-site")
    origin = request.headers.get("origin")
    if (site is not None and site not in _OWN_SITE) or (
            origin is not None and origin.lower() not in _own_origins(request)):
        raise Forbidden("a state change from another site may not use the session cookie")


def _own_origins(request: Request) -> set[str]:
    """This request's own origin, and the configured public URL's (a proxy may rename Host)."""
    origins = {f"{request.url.scheme}://{request.url.netloc}".lower()}
    base_url: str | None = request.app.state.settings.base_url
    if base_url:
        public = urlsplit(base_url)
        origins.add(f"{public.scheme}://{public.netloc}".lower())
    return origins


def _is_form(request: Request) -> bool:
    content_type = request.headers.get("content-type", "")
    return content_type.startswith(("application/x-www-form-urlencoded", "multipart/form-data"))


# A form's dependencies: sign-in is checked before the CSRF token, so that an anonymous browser
# is sent to log in.
STATE_CHANGING = [Depends(require_principal), Depends(verify_csrf)]
