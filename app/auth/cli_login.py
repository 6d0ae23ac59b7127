"""HTML: `portalctl login` through the browser, as `gcloud auth login` and `az login` do.

portalctl listens once on 127.0.0.1 and opens ``/cli/login?port=P&state=S&name=N``. A signed-in
user sees the API token that will be made for the command line and confirms it; the portal
mints it with the token service (audited as ``api_token.create``) and hands it to
``http://127.0.0.1:P/callback`` with the state.

Why an auto-submitting form POST rather than a redirect with the token in the query: a URL is
kept in the browser's history, can be synced across devices and shows in any log that records
request lines; a POST body is in none of those. The page itself is ``no-store``, and
``http://127.0.0.1`` is a potentially trustworthy origin, so an HTTPS portal posting to it is
not an insecure form submission to the browser.

Only the port comes from the request: the host is always 127.0.0.1, so no link can make the
portal send a token anywhere but the machine the browser runs on.
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from pydantic import ValidationError
from starlette.responses import RedirectResponse, Response

from app.auth import token_service
from app.auth.csrf import STATE_CHANGING
from app.auth.deps import CurrentPrincipal, MaybePrincipal
from app.auth.principal import Principal
from app.auth.schemas import CliLoginRequest
from app.auth.token_api import AppSettings
from app.http.deps import DbSession
from app.http.middleware import CONTENT_SECURITY_POLICY
from app.http.routing import UnitOfWorkRoute
from app.kit.errors import Forbidden
from app.web.forms import validation_errors
from app.web.templating import render

router = APIRouter(prefix="/cli", include_in_schema=False, route_class=UnitOfWorkRoute)

LOOPBACK = "127.0.0.1"
CALLBACK_PATH = "/callback"
_DIGITS = re.compile(r"[0-9]{1,9}")


def listener_url(port: int) -> str:
    return f"http://{LOOPBACK}:{port}{CALLBACK_PATH}"


def cli_scopes(principal: Principal) -> list[str]:
    """The user's own powers: admin only means something for platform admins."""
    return list(token_service.scopes_offered(principal))


@router.get("/login")
def confirm_page(
    request: Request, principal: MaybePrincipal, port: str = "", state: str = "",
    name: str = "portalctl", expires_in_days: str = "30",
) -> Response:
    if principal is None:
        # Through single sign-on and back here, with the whole query: the handler for 401s
        # keeps only the path.
        back = f"{request.url.path}?{request.url.query}"
        return RedirectResponse(f"/auth/login?next={quote(back, safe='')}", status_code=303)
    _browser_only(principal)
    if not port and not state:
        # Opened by hand rather than by portalctl: how to start from the terminal.
        return render(request, "auth/cli_login.html", {"ask": None})
    try:
        ask = _parse(port, state, name, expires_in_days)
    except ValidationError as error:
        return _refusal(request, error)
    return render(request, "auth/cli_login.html", {
        "ask": ask, "scopes": cli_scopes(principal), "target": listener_url(ask.port)})


@router.post("/login", dependencies=STATE_CHANGING)
def decide(
    request: Request, principal: CurrentPrincipal, db: DbSession, settings: AppSettings,
    port: Annotated[str, Form()] = "", state: Annotated[str, Form()] = "",
    name: Annotated[str, Form()] = "", expires_in_days: Annotated[str, Form()] = "",
    decision: Annotated[str, Form()] = "",
) -> Response:
    _browser_only(principal)
    try:
        ask = _parse(port, state, name, expires_in_days)
    except ValidationError as error:
        return _refusal(request, error)
    if decision != "create":
        return _hand_off(request, ask, {"state": ask.state, "error": "cancelled"})
    _token, secret = token_service.create_token(
        db, principal, settings, name=ask.name, scopes=cli_scopes(principal),
        expires_in_days=ask.expires_in_days)
    return _hand_off(request, ask, {"state": ask.state, "token": secret})


def _browser_only(principal: Principal) -> None:
    if principal.via != "session":
        raise Forbidden("the command-line sign-in is for a browser signed in to the portal")


def _parse(port: str, state: str, name: str, expires_in_days: str) -> CliLoginRequest:
    return CliLoginRequest.model_validate({
        "port": _int_or_raw(port), "state": state, "name": name or "portalctl",
        "expires_in_days": _int_or_raw(expires_in_days or "30")})


def _refusal(request: Request, error: ValidationError) -> Response:
    problems = "; ".join(f"{field}: {message}"
                         for field, message in validation_errors(error).items())
    return render(request, "error.html", {
        "title": "This command-line sign-in link is not valid",
        "detail": f"{problems}. Run portalctl login again.",
    }, status_code=422)


def _hand_off(request: Request, ask: CliLoginRequest, fields: dict[str, str]) -> Response:
    """A page whose form posts ``fields`` to the listener by itself (a button without script)."""
    target = listener_url(ask.port)
    response = render(request, "auth/cli_handoff.html", {"target": target, "fields": fields})
    response.headers["Cache-Control"] = "no-store"
    response.headers["Content-Security-Policy"] = _policy_allowing_form_to(
        f"http://{LOOPBACK}:{ask.port}")
    return response


def _policy_allowing_form_to(origin: str) -> str:
    """The portal's policy, its form-action widened to the listener alone."""
    directives = [d.strip() for d in CONTENT_SECURITY_POLICY.split(";") if d.strip()]
    kept = [d for d in directives if not d.startswith("form-action")]
    return "; ".join([*kept, f"form-action 'self' {origin}"])


def _int_or_raw(text: str) -> int | str:
    return int(text) if _DIGITS.fullmatch(text.strip()) else text
