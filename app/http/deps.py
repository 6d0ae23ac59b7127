"""FastAPI dependencies shared by the routers: the unit of work, settings and row ids.

The caller (``CurrentPrincipal``) is auth's: ``app.auth.deps``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Annotated

from fastapi import Depends, Path, Request
from sqlalchemy.orm import Session

from app.database.core import Database
from app.http import hop
from app.kit.config import Settings
from app.kit.validation import MAX_ROW_ID

# Dependencies are async where they do no I/O: FastAPI runs every sync one in a worker thread.


async def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_db(request: Request) -> AsyncIterator[Session]:
    """The request's transaction: committed before the response goes out, else rolled back.

    Endpoints routed by ``app.http.routing.UnitOfWorkRoute`` commit or roll back in their own
    worker thread; what is left here is closing (no I/O), or ending what was read after it.
    """
    database: Database = request.app.state.database
    reads = _reads_only(request)
    session = database.read_session() if reads else database.session()
    request.state.db = session
    try:
        yield session
    except BaseException:
        await _end(session, _rollback_and_close)
        raise
    await _end(session, None if reads else _commit_and_close)


async def _end(session: Session, ending: Callable[[Session], None] | None) -> None:
    """Mostly the endpoint's hop ended the transaction already, and closing is no I/O. A
    transaction still open (something read after the hop) ends on ``hop.release``, never
    queued behind requests that may wait for its locks. A read session has nothing to commit
    (autocommit on PostgreSQL; a GET that writes fails at its flush)."""
    if ending is None or not session.in_transaction():
        session.close()
    else:
        await hop.release(ending, session)


def _reads_only(request: Request) -> bool:
    """GETs read, except signing in and out (``/auth/``), which writes users and sessions; a
    GET that writes all the same fails loudly (``app.database.core.ReadOnlyViolation``),
    never half-way."""
    return request.method in ("GET", "HEAD") and not request.scope["path"].startswith("/auth/")


def _commit_and_close(session: Session) -> None:
    try:
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def _rollback_and_close(session: Session) -> None:
    try:
        session.rollback()
    finally:
        session.close()


DbSession = Annotated[Session, Depends(get_db, scope="function")]


# Row ids in paths: bounded, so that an absurd id is a 422 rather than a database overflow.
RowId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="a row id")]
