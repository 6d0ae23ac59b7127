"""Browser sign-in and sign-out."""

from __future__ import annotations

import logging
import secrets
from typing import Any

from authlib.integrations.base_client.errors import OAuthError
from fastapi import APIRouter, Depends, Request
from starlette.responses import RedirectResponse, Response

from app.audit import service as audit
from app.auth import service
from app.auth.csrf import verify_csrf
from app.auth.oidc import CLIENT_NAME
from app.auth.sessions import end_session, rotate_session
from app.database.core import Database
from app.http import hop
from app.http.routing import UnitOfWorkRoute
from app.kit.config import Settings
from app.kit.errors import ServiceUnavailable
from app.web.templating import render

router = APIRouter(prefix="/auth", include_in_schema=False, route_class=UnitOfWorkRoute)
log = logging.getLogger(__name__)


def _safe_next(target: str | None) -> str:
    """Only same-site paths: an open redirect would hand the session to anyone."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


def _client(request: Request) -> Any:
    oauth = request.app.state.oauth
    if oauth is None:
        raise ServiceUnavailable("single sign-on is not configured (PORTAL_OIDC_ISSUER)")
    return oauth.create_client(CLIENT_NAME)


@router.get("/login")
async def login(request: Request, next: str | None = None) -> Response:
    client = _client(request)
    request.session["next"] = _safe_next(next)
    redirect_uri = str(request.url_for("auth_callback"))
    response: Response = await client.authorize_redirect(request, redirect_uri)
    return response


@router.get("/callback", name="auth_callback")
async def callback(request: Request) -> Response:
    client = _client(request)
    settings: Settings = request.app.state.settings
    try:
        token = await client.authorize_access_token(request)
    except OAuthError as error:
        return await _refused(request, error.error or "oauth_error", _refusal_message(error))
    claims = dict(token.get("userinfo") or {})
    metadata = await client.load_server_metadata()
    identity = service.identity_from_claims(
        str(metadata["issuer"]), claims, settings.oidc_groups_claim
    )
    problem = service.identity_problem(identity)
    if problem:
        return await _refused(request, "identity_too_long", problem)
    user_id = await hop.run_sync(_sign_in, request, identity, settings.oidc_admin_group)
    next_path = _safe_next(request.session.get("next"))
    request.session.clear()
    rotate_session(request)
    request.session.update({"uid": user_id, "csrf": secrets.token_urlsafe(32)})
    return RedirectResponse(next_path, status_code=303)


async def _refused(request: Request, reason: str, detail: str) -> Response:
    await hop.run_sync(_audit_failed_sign_in, request, reason)
    log.info("sign-in refused: %s", reason)
    return render(request, "error.html", {"title": "Sign-in failed", "detail": detail},
                  status_code=400)


def _refusal_message(error: OAuthError) -> str:
    if error.error == "access_denied":
        return "You declined to share your identity with the portal, so you are not signed in."
    if error.error == "mismatching_state":
        return "This sign-in attempt is stale or was not started here. Please sign in again."
    return "The identity provider did not complete the sign-in. Please try again."


def _sign_in(request: Request, identity: service.Identity, admin_group: str) -> int:
    database: Database = request.app.state.database
    with database.transaction() as db:
        return service.sign_in(db, identity, admin_group).id


def _audit_failed_sign_in(request: Request, reason: str) -> None:
    database: Database = request.app.state.database
    with database.transaction() as db:
        audit.record(db, action="auth.sign_in_failed", actor_id=None, after={"reason": reason})


@router.post("/logout", dependencies=[Depends(verify_csrf)])
async def logout(request: Request) -> Response:
    end_session(request)
    return RedirectResponse("/", status_code=303)
