"""HTML: the caller's API tokens."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Form, Request
from sqlalchemy.orm import Session
from starlette.responses import Response

from app.auth import token_service
from app.auth.csrf import STATE_CHANGING
from app.auth.deps import CurrentPrincipal
from app.auth.principal import Principal
from app.auth.schemas import TokenCreate
from app.auth.token_api import AppSettings
from app.http.deps import DbSession, RowId
from app.http.pagination import PageParams
from app.http.routing import UnitOfWorkRoute
from app.kit.config import Settings
from app.web.forms import go_to, submitted
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)
# ASCII digits only: str.isdigit() also holds for "²" and for numbers int() will not parse.
_DIGITS = re.compile(r"[0-9]{1,9}")


def _page(
    request: Request, db: Session, principal: Principal, settings: Settings,
    status_code: int = 200, **extra: object
) -> Response:
    tokens, _ = token_service.list_tokens(db, principal, PageParams(limit=200))
    return render(request, "auth/tokens.html",
                  {"tokens": tokens, "scopes": token_service.scopes_offered(principal),
                   "max_days": settings.token_max_lifetime_days, **extra},
                  status_code=status_code)


@router.get("/tokens")
def tokens_page(request: Request, principal: CurrentPrincipal, db: DbSession,
                settings: AppSettings) -> Response:
    return _page(request, db, principal, settings)


@router.post("/tokens", dependencies=STATE_CHANGING)
def create_token(
    request: Request, principal: CurrentPrincipal, db: DbSession, settings: AppSettings,
    name: Annotated[str, Form()] = "", scopes: Annotated[list[str] | None, Form()] = None,
    expires_in_days: Annotated[str, Form()] = "30",
) -> Response:
    typed = {"name": name, "scopes": scopes or [], "expires": expires_in_days}

    def create() -> Response:
        payload = TokenCreate.model_validate(
            {"name": name, "scopes": scopes or [], "expires_in_days": _int_or_raw(expires_in_days)}
        )
        token, secret = token_service.create_token(
            db, principal, settings, name=payload.name, scopes=list(payload.scopes),
            expires_in_days=payload.expires_in_days,
        )
        response = _page(request, db, principal, settings, created=token, secret=secret)
        response.headers["Cache-Control"] = "no-store"
        return response

    return submitted(create, lambda refusal: _page(
        request, db, principal, settings, errors=refusal.errors, status_code=refusal.status,
        form=typed))


@router.post("/tokens/{token_id}/revoke", dependencies=STATE_CHANGING)
def revoke_token(
    token_id: RowId, request: Request, principal: CurrentPrincipal, db: DbSession,
) -> Response:
    token_service.revoke_token(db, principal, token_id)
    return go_to(request, "/tokens", focus=f"token-{token_id}")


def _int_or_raw(text: str) -> int | str:
    return int(text) if _DIGITS.fullmatch(text.strip()) else text
