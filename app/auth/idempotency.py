"""``Idempotency-Key`` on creating POSTs: the same key and body replay the first response.

A key reused with a different body is a 422; a key whose first request is still running (or
raced another) is a 409 the client may retry.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Header
from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starlette.responses import JSONResponse, Response

from app.auth.models import IdempotencyKey
from app.auth.principal import Principal
from app.kit.errors import Conflict, ValidationFailed

MAX_KEY_LENGTH = 255


def _fingerprint(path: str, payload: BaseModel | None) -> str:
    body = payload.model_dump(mode="json") if payload is not None else None
    return hashlib.sha256(json.dumps([path, body], sort_keys=True).encode()).hexdigest()


def run_idempotent(
    db: Session,
    principal: Principal,
    key: str | None,
    *,
    path: str,
    payload: BaseModel | None,
    allowed: Callable[[], object],
    create: Callable[[], BaseModel],
    status_code: int = 201,
) -> Response:
    """``allowed`` raises unless the caller may create here now: a replay is checked too, so a
    member removed since the first request cannot read it back."""
    allowed()
    if key is None:  # encoded straight from the model: the bytes of the dump below, sooner
        created = create()
        return Response(created.__pydantic_serializer__.to_json(created),
                        status_code=status_code, media_type="application/json")
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise ValidationFailed.on_field("Idempotency-Key", "1-255 printable characters")
    owner = f"user:{principal.user_id}"
    fingerprint = _fingerprint(path, payload)
    stored = db.scalar(select(IdempotencyKey).where(
        IdempotencyKey.principal == owner, IdempotencyKey.key == key))
    if stored is not None:
        return _replay(stored, fingerprint)
    body: dict[str, Any] = create().model_dump(mode="json")
    try:
        with db.begin_nested():
            db.add(IdempotencyKey(principal=owner, key=key, request_fingerprint=fingerprint,
                                  status_code=status_code, response_body=body))
    except IntegrityError as error:
        raise Conflict("another request with this Idempotency-Key is in flight; retry") from error
    return JSONResponse(body, status_code=status_code)


def _replay(stored: IdempotencyKey, fingerprint: str) -> JSONResponse:
    if stored.request_fingerprint != fingerprint:
        raise ValidationFailed.on_field(
            "Idempotency-Key", "this key was used with a different request body"
        )
    return JSONResponse(stored.response_body, status_code=stored.status_code,
                        headers={"Idempotent-Replayed": "true"})


IdempotencyKeyHeader = Annotated[str | None, Header(alias="Idempotency-Key")]
