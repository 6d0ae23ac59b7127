"""Cursor pagination for every list: ``?limit=`` and an opaque ``?cursor=`` (the last id)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Depends, Query
from pydantic import BaseModel
from sqlalchemy import Select
from sqlalchemy.orm import InstrumentedAttribute, Session

from app.errors import ValidationFailed
from app.validation import MAX_ROW_ID

T = TypeVar("T")
Row = TypeVar("Row")


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = None


class PageParams(BaseModel):
    limit: int = 50
    cursor: str | None = None


async def page_params(
    limit: Annotated[int, Query(ge=1, le=200, description="items per page")] = 50,
    cursor: Annotated[str | None, Query(max_length=64, description="from next_cursor")] = None,
) -> PageParams:
    return PageParams(limit=limit, cursor=cursor)


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(str(last_id).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        last_id = int(base64.urlsafe_b64decode(padded.encode()).decode())
    except (ValueError, UnicodeDecodeError) as error:
        raise ValidationFailed.on_field("cursor", "not a cursor this API gave out") from error
    # Beyond what an id column holds, the database would refuse the comparison with a 500.
    if not 0 <= last_id <= MAX_ROW_ID:
        raise ValidationFailed.on_field("cursor", "not a cursor this API gave out")
    return last_id


def paginate(
    db: Session,
    query: Select[Row],
    id_column: InstrumentedAttribute[int],
    params: PageParams,
    *,
    newest_first: bool = False,
) -> tuple[Sequence[Row], str | None]:
    """Keyset pagination on an integer id: stable under inserts, no OFFSET scans."""
    if params.cursor:
        last = decode_cursor(params.cursor)
        query = query.where(id_column < last if newest_first else id_column > last)
    query = query.order_by(id_column.desc() if newest_first else id_column.asc())
    rows = db.scalars(query.limit(params.limit + 1)).all()
    if len(rows) <= params.limit:
        return rows, None
    rows = rows[: params.limit]
    last_row: Any = rows[-1]
    return rows, encode_cursor(int(last_row.id))


Paging = Annotated[PageParams, Depends(page_params)]
