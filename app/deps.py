"""FastAPI dependencies shared by the routers: the unit of work and the caller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path, Request
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.auth.principal import Principal
from app.auth.tokens import active_token
from app.config import Settings
from app.db import Database
from app.errors import Unauthenticated
from app.tenants.models import Membership
from app.validation import MAX_ROW_ID


def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_database(request: Request) -> Database:
    database: Database = request.app.state.database
    return database


def get_db(request: Request) -> Iterator[Session]:
    """The request's transaction: committed before the response goes out, else rolled back."""
    with get_database(request).transaction() as db:
        yield db


DbSession = Annotated[Session, Depends(get_db, scope="function")]


def _principal_for(db: Session, request: Request) -> Principal | None:
    authorization = request.headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        token = active_token(db, authorization[7:].strip())
        if token is None:
            raise Unauthenticated("the API token is unknown, expired or revoked")
        user = db.get(User, token.user_id)
        if user is None:
            raise Unauthenticated("the API token's user is gone")
        return Principal(user=user, via="token", scopes=frozenset(token.scopes),
                         roles=_roles(db, user.id))
    user_id = request.session.get("uid") if "session" in request.scope else None
    if user_id is None:
        return None
    user = db.get(User, user_id)
    if user is None:
        return None
    return Principal(user=user, via="session", roles=_roles(db, user.id))


def _roles(db: Session, user_id: int) -> dict[int, str]:
    rows = db.execute(
        select(Membership.tenant_id, Membership.role).where(Membership.user_id == user_id)
    )
    return dict(rows.all())


def optional_principal(request: Request, db: DbSession) -> Principal | None:
    principal = _principal_for(db, request)
    request.state.principal = principal
    # Plain values for error handlers, which run after the request's session is gone.
    request.state.actor = (principal.user_id, principal.label) if principal else None
    return principal


def require_principal(
    principal: Annotated[Principal | None, Depends(optional_principal)],
) -> Principal:
    if principal is None:
        raise Unauthenticated("sign in or send an API token")
    return principal


CurrentPrincipal = Annotated[Principal, Depends(require_principal)]
MaybePrincipal = Annotated[Principal | None, Depends(optional_principal)]

# Row ids in paths: bounded, so that an absurd id is a 422 rather than a database overflow.
RowId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="a row id")]
