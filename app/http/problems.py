"""Error answers in the OpenAPI document: every 4xx of the API is ``application/problem+json``.

Routers declare the errors an operation can give with ``responses=problems(403, 404)``; 401
comes with every route that needs a caller, and FastAPI's own 422 (added wherever there are
parameters or a body) is rewritten to the same shape by ``PortalApi.openapi``.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, Field

from app.kit.errors import PROBLEM_JSON

MEANINGS = {
    401: "Not signed in: send an API token (`Authorization: Bearer …`) or the session cookie; "
    "the token may be unknown, expired or revoked",
    403: "Signed in, but not allowed: your role in the tenant, a read-only token, a suspended "
    "tenant, or an operation for platform admins only (`detail` says which)",
    404: "Not found, or a tenant you may not see (the same answer, so names cannot be probed)",
    409: "Conflicts with the current state (`detail` says what): a name taken, quota or "
    "capacity exceeded, a state that does not allow it, or an `Idempotency-Key` still in "
    "flight",
    422: "The request is invalid: `errors` lists each field and what is wrong with it",
}


class FieldProblem(BaseModel):
    field: str = Field(description="the parameter or body field, dotted (`gpus`, `query.limit`)")
    message: str


class Problem(BaseModel):
    """An error as RFC 9457 problem details."""

    type: str = Field(description="a URI naming the kind of problem")
    title: str = Field(description="the kind of problem, e.g. `Forbidden`")
    status: int = Field(description="the HTTP status")
    detail: str = Field(description="what went wrong here, for a person to read")
    instance: str = Field(description="the request's path")
    request_id: str = Field(description="quote it when asking an operator; also in X-Request-ID")
    errors: list[FieldProblem] | None = Field(
        default=None, description="for a 422: one entry per invalid field"
    )


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for these error statuses, each a ``Problem``."""
    return {status: {"model": Problem, "description": MEANINGS[status]} for status in statuses}


_REF = "#/components/schemas/Problem"


class PortalApi(FastAPI):
    """FastAPI whose OpenAPI document shows every error as ``application/problem+json``, the
    way the error handlers answer."""

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            self.openapi_schema = errors_as_problems(super().openapi())
        return self.openapi_schema


def errors_as_problems(document: dict[str, Any]) -> dict[str, Any]:
    """Every 4xx answer's content becomes ``application/problem+json`` with ``Problem``."""
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            for status, response in operation.get("responses", {}).items():
                if status.startswith("4"):
                    response["content"] = {PROBLEM_JSON: {"schema": {"$ref": _REF}}}
                    if status == "422":
                        response["description"] = MEANINGS[422]
    schemas = document.get("components", {}).get("schemas", {})
    for replaced in ("HTTPValidationError", "ValidationError"):
        if f'"#/components/schemas/{replaced}"' not in json.dumps(document["paths"]):
            schemas.pop(replaced, None)
    return document
