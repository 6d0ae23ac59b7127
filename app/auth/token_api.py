"""REST: the caller's API tokens."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from app.auth import token_service
from app.auth.deps import CurrentPrincipal
from app.auth.schemas import TokenCreate, TokenCreated, TokenOut
from app.http.deps import DbSession, RowId, get_settings_dep
from app.http.pagination import Page, Paging
from app.http.problems import problems
from app.http.routing import UnitOfWorkRoute
from app.kit.config import Settings

router = APIRouter(prefix="/api/v1/tokens", tags=["tokens"], route_class=UnitOfWorkRoute)
AppSettings = Annotated[Settings, Depends(get_settings_dep)]


def token_out(token: object) -> TokenOut:
    """From an ``ApiToken`` or a row of its columns."""
    return TokenOut.model_validate(token, from_attributes=True)


@router.get("", response_model=Page[TokenOut], summary="List your API tokens")
def list_tokens(
    principal: CurrentPrincipal, db: DbSession,
    params: Paging,
) -> Page[TokenOut]:
    """Your own API tokens, newest first: name, scopes, expiry, last use and whether revoked.
    Secrets are never shown again after creation."""
    rows, cursor = token_service.list_tokens(db, principal, params)
    return Page(items=[token_out(t) for t in rows], next_cursor=cursor)


@router.post("", status_code=201, response_model=TokenCreated,
             summary="Create an API token", responses=problems(403, 409))
def create_token(payload: TokenCreate, principal: CurrentPrincipal, db: DbSession,
                 settings: AppSettings) -> Response:
    """Makes an API token for you and answers with its secret, once: store it now, it is kept only
    as a hash. Scopes: `read`, `write`, `admin` (what a platform admin may do). 403 from a
    read-only token, or for more scopes than the token in use has; 409 when you already hold
    `PORTAL_USER_MAX_LIVE_TOKENS` live tokens (the answer names the limit and the count); 422
    for a lifetime past `PORTAL_TOKEN_MAX_LIFETIME_DAYS`. Not replayable with
    Idempotency-Key: the secret is never stored."""
    token, secret = token_service.create_token(
        db, principal, settings, name=payload.name, scopes=list(payload.scopes),
        expires_in_days=payload.expires_in_days,
    )
    body = TokenCreated(**token_out(token).model_dump(), token=secret)
    return Response(body.__pydantic_serializer__.to_json(body), status_code=201,
                    media_type="application/json", headers={"Cache-Control": "no-store"})


@router.delete("/current", status_code=204,
               summary="Revoke the token in use", responses=problems(404, 422))
def revoke_current_token(request: Request, principal: CurrentPrincipal, db: DbSession) -> Response:
    """Revokes the API token this request is made with (what `portalctl logout` does); any
    token may revoke itself, a read-only one too. 422 when the request is not made with a
    token, 404 when it is already gone."""
    authorization = request.headers.get("authorization", "")
    token_service.revoke_current(db, principal, authorization[7:].strip())
    return Response(status_code=204)


@router.delete("/{token_id}", status_code=204,
               summary="Revoke an API token", responses=problems(403, 404))
def revoke_token(token_id: RowId, principal: CurrentPrincipal, db: DbSession) -> Response:
    """Revokes one of your API tokens by id; it stops working at once. A token may always
    revoke itself; revoking another takes the `write` scope (403 from a read-only token).
    Audited."""
    token_service.revoke_token(db, principal, token_id)
    return Response(status_code=204)
