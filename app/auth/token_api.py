"""REST: the caller's API tokens."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from app.auth import token_service
from app.auth.deps import CurrentPrincipal
from app.auth.models import ApiToken
from app.auth.schemas import TokenCreate, TokenCreated, TokenOut
from app.http.deps import DbSession, RowId
from app.http.pagination import Page, Paging
from app.http.routing import UnitOfWorkRoute

router = APIRouter(prefix="/api/v1/tokens", tags=["tokens"], route_class=UnitOfWorkRoute)


def token_out(token: ApiToken) -> TokenOut:
    return TokenOut.model_validate(token, from_attributes=True)


@router.get("", response_model=Page[TokenOut])
def list_tokens(
    principal: CurrentPrincipal, db: DbSession,
    params: Paging,
) -> Page[TokenOut]:
    rows, cursor = token_service.list_tokens(db, principal, params)
    return Page(items=[token_out(t) for t in rows], next_cursor=cursor)


@router.post("", status_code=201, response_model=TokenCreated)
def create_token(payload: TokenCreate, principal: CurrentPrincipal, db: DbSession) -> JSONResponse:
    """Shows the secret once. Not replayable with Idempotency-Key: the secret is never stored."""
    token, secret = token_service.create_token(
        db, principal, name=payload.name, scopes=list(payload.scopes),
        expires_in_days=payload.expires_in_days,
    )
    body = TokenCreated(**token_out(token).model_dump(), token=secret)
    return JSONResponse(body.model_dump(mode="json"), status_code=201,
                        headers={"Cache-Control": "no-store"})


@router.delete("/current", status_code=204)
def revoke_current_token(request: Request, principal: CurrentPrincipal, db: DbSession) -> Response:
    """Revokes the token this request is made with (`portalctl logout`)."""
    authorization = request.headers.get("authorization", "")
    token_service.revoke_current(db, principal, authorization[7:].strip())
    return Response(status_code=204)


@router.delete("/{token_id}", status_code=204)
def revoke_token(token_id: RowId, principal: CurrentPrincipal, db: DbSession) -> Response:
    token_service.revoke_token(db, principal, token_id)
    return Response(status_code=204)
