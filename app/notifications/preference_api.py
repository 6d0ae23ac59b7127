"""REST: the caller's notification preferences."""

from __future__ import annotations

from fastapi import APIRouter

from app.auth.deps import CurrentPrincipal
from app.http.deps import DbSession
from app.http.problems import problems
from app.http.routing import UnitOfWorkRoute
from app.notifications import preference_service
from app.notifications.preference_schemas import PreferenceOut, PreferencesIn
from app.notifications.preference_service import Choice

router = APIRouter(prefix="/api/v1/me/notification-preferences", tags=["me"],
                   route_class=UnitOfWorkRoute)


def preference_out(choice: Choice) -> PreferenceOut:
    kind = choice.kind
    return PreferenceOut(kind=kind.name, title=kind.title, description=kind.description,
                         email=choice.email, mandatory=kind.mandatory)


@router.get("", response_model=list[PreferenceOut], summary="Your notification preferences")
def list_preferences(principal: CurrentPrincipal, db: DbSession) -> list[PreferenceOut]:
    """Each kind of notification you can receive (tenant kinds as your roles in your tenants
    bring them, platform kinds if you are a platform admin, those about you always) and
    whether it is emailed to you. A mandatory kind is always emailed."""
    return [preference_out(choice) for choice in preference_service.choices(db, principal)]


@router.put("", response_model=list[PreferenceOut], summary="Change your notification "
            "preferences", responses=problems(403, 422))
def change_preferences(payload: PreferencesIn, principal: CurrentPrincipal,
                       db: DbSession) -> list[PreferenceOut]:
    """Turns email on or off for the kinds named; the others stay as they are. Answers the
    whole list as `GET` does. 422, nothing changed, for a kind that does not exist, that you
    do not receive, or that is mandatory and asked off (the answer names it); 403 from a
    read-only token. Audited as `notification_preference.change`."""
    wanted = {item.kind: item.email for item in payload.preferences}
    return [preference_out(choice)
            for choice in preference_service.change(db, principal, wanted)]
