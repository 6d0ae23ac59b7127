"""A request's thread hop (``app.http.routing``) hands its connection back to the pool before the
thread takes the next request: held until the event loop came back to close the session, a busy
process had more connections out than threads and opened new ones past the pool's size."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session
from sqlalchemy.pool import QueuePool
from starlette.requests import Request

from app.database.core import Database
from app.http.routing import in_one_hop
from app.tenants.models import Tenant
from tests import factories
from tests.test_hop import run_alone


def _slugs(db: Session) -> list[str]:
    return list(db.scalars(select(Tenant.slug).order_by(Tenant.slug)))


def _checked_out(database: Database) -> int:
    pool = database.engine.pool
    assert isinstance(pool, QueuePool)
    return pool.checkedout()


def _in_one_hop(endpoint: Callable[[Session], Any], session: Session) -> Any:
    """``endpoint`` as a route runs it, with the session ``get_db`` gave the request."""
    request = Request({"type": "http", "state": {"db": session}})
    return run_alone(in_one_hop(endpoint)(db=session, unit_of_work_request_=request))


def test_a_read_requests_connection_is_back_in_the_pool_when_its_thread_is_done(
        own_pg_database: Database) -> None:
    with own_pg_database.transaction() as db:
        factories.tenant(db, "acme")
    session = own_pg_database.read_session()
    try:
        found = _in_one_hop(_slugs, session)
        assert found == ["acme"]
        assert _checked_out(own_pg_database) == 0
    finally:
        session.close()


def test_a_read_request_that_changed_a_row_in_memory_keeps_it_until_the_session_closes(
        own_pg_database: Database) -> None:
    """A page may set an attribute for its template: not refused as a write, not flushed, and
    the connection goes back when the request's dependency closes the session."""
    with own_pg_database.transaction() as db:
        factories.tenant(db, "acme")
    session = own_pg_database.read_session()

    def rename_for_display(db: Session) -> str:
        tenant = db.scalars(select(Tenant).where(Tenant.slug == "acme")).one()
        tenant.display_name = "ACME (suspended)"
        return tenant.display_name

    try:
        assert _in_one_hop(rename_for_display, session) == "ACME (suspended)"
        assert _checked_out(own_pg_database) == 1
    finally:
        session.close()
    assert _checked_out(own_pg_database) == 0
    with own_pg_database.transaction() as db:
        assert db.scalars(select(Tenant.display_name)).one() != "ACME (suspended)"


def test_a_write_requests_changes_are_committed_and_its_connection_returned(
        own_pg_database: Database) -> None:
    session = own_pg_database.session()

    def create(db: Session) -> None:
        factories.tenant(db, "globex")

    try:
        _in_one_hop(create, session)
        assert _checked_out(own_pg_database) == 0
    finally:
        session.close()
    with own_pg_database.transaction() as db:
        assert _slugs(db) == ["globex"]
