"""HTML: the caller's notification preferences, a form of checkboxes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from sqlalchemy.orm import Session
from starlette.responses import Response

from app.auth.csrf import STATE_CHANGING
from app.auth.deps import CurrentPrincipal
from app.auth.principal import Principal
from app.http.deps import DbSession
from app.http.routing import UnitOfWorkRoute
from app.notifications import preference_service
from app.web.forms import go_to, submitted
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)
PATH = "/account/notifications"
SAVED = "saved"


def _page(request: Request, db: Session, principal: Principal, status_code: int = 200,
          **extra: object) -> Response:
    return render(request, "notifications/pages/preferences.html",
                  {"choices": preference_service.choices(db, principal), **extra},
                  status_code=status_code)


@router.get(PATH)
def preferences_page(request: Request, principal: CurrentPrincipal, db: DbSession) -> Response:
    # Where a save lands: the confirmation, said on the page itself (a plain form post has no
    # toast). Only a flag to show it; nothing is read from it.
    return _page(request, db, principal, saved=request.query_params.get(SAVED) == "1")


@router.post(PATH, dependencies=STATE_CHANGING)
def save_preferences(
    request: Request, principal: CurrentPrincipal, db: DbSession,
    kinds: Annotated[list[str] | None, Form()] = None,
    email: Annotated[list[str] | None, Form()] = None,
) -> Response:
    """``kinds``: the kinds the form showed as choices (mandatory ones are not: their boxes
    are disabled and send nothing); ``email``: those of them left checked."""
    checked = set(email or [])
    wanted = {kind: kind in checked for kind in kinds or []}

    def save() -> Response:
        preference_service.change(db, principal, wanted)
        return go_to(request, f"{PATH}?{SAVED}=1", focus=SAVED)

    return submitted(save, lambda refusal: _page(
        request, db, principal, errors=refusal.errors, status_code=refusal.status))
