"""CSRF: a per-session token that every cookie-authenticated state change must echo.

Forms send it as ``csrf_token``; htmx sends it as the ``X-CSRF-Token`` header set through
``hx-headers`` on ``<body>``. Bearer-token requests carry no ambient credential and skip it.
"""

from __future__ import annotations

import hmac

from fastapi import Request

from app.errors import Forbidden

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


async def verify_csrf(request: Request) -> None:
    if request.method in SAFE_METHODS:
        return
    if request.headers.get("authorization", "").lower().startswith("bearer "):
        return
    expected = request.session.get("csrf") if "session" in request.scope else None
    sent = request.headers.get("x-csrf-token")
    if sent is None and _is_form(request):
        sent = str((await request.form()).get("csrf_token") or "")
    if not expected or not sent or not hmac.compare_digest(expected, sent):
        raise Forbidden("missing or wrong CSRF token; reload the page and try again")


def _is_form(request: Request) -> bool:
    content_type = request.headers.get("content-type", "")
    return content_type.startswith(("application/x-www-form-urlencoded", "multipart/form-data"))
