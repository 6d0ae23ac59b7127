"""JSON answers encoded straight from plain values, for the hot list endpoints.

Why: FastAPI validates an endpoint's result against its response model and then serializes
it; for a page of rows that cost more than reading them. An endpoint that returns this
``Response`` keeps its ``response_model`` (so the OpenAPI schema is unchanged) while its rows,
built as dicts with the model's field names and types, are encoded by orjson. Datetimes come
out as pydantic writes them (ISO 8601, ``Z`` for UTC); tests compare the bytes.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

_OPTIONS = orjson.OPT_UTC_Z


def json_response(content: Any, status_code: int = 200) -> Response:
    return Response(orjson.dumps(content, option=_OPTIONS), status_code=status_code,
                    media_type="application/json")


def page_response(items: list[dict[str, Any]], next_cursor: str | None) -> Response:
    """A ``Page`` of items, as ``app.pagination.Page`` serializes."""
    return json_response({"items": items, "next_cursor": next_cursor})
