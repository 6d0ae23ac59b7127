"""The unit of work's plumbing: sessions for requests that only read, and pooled connections
the database server dropped."""

from __future__ import annotations

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.database import core as app_db
from app.database.concurrency import contended, lock_row, timed_out
from app.database.core import Database, ReadOnlyViolation
from app.database.kept import Kept
from app.gpu_classes.models import GpuClass
from app.kit.config import Settings
from app.process.asgi import create_app
from tests import factories
from tests.support import postgres
from tests.support.principals import bearer


def test_a_read_only_session_refuses_to_write_and_leaves_nothing_behind(
    own_pg_database: Database,
) -> None:
    with own_pg_database.read_session() as session, pytest.raises(ReadOnlyViolation):
        factories.user(session, "reader@example.com")
    with own_pg_database.read_session() as session:
        found = session.execute(text("SELECT count(*) FROM users WHERE email = :e"),
                                {"e": "reader@example.com"}).scalar_one()
    assert found == 0


def test_a_read_only_session_refuses_an_audit_event_too(own_pg_database: Database) -> None:
    """An event is an INSERT statement rather than a flushed row: refused all the same."""
    with own_pg_database.read_session() as session, pytest.raises(ReadOnlyViolation):
        audit.record(session, action="test.read_only", actor_id=None)
    with own_pg_database.read_session() as session:
        found = session.execute(text("SELECT count(*) FROM audit_events "
                                     "WHERE action = 'test.read_only'")).scalar_one()
    assert found == 0


def _drop_connections(database: Database) -> None:
    """What a database restart does to the pool's connections."""
    name = database.engine.url.database
    with psycopg.connect(postgres.ADMIN_DSN, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))


def _caller(database: Database) -> dict[str, str]:
    with database.transaction() as session:
        return bearer(session, factories.user(session))


def test_a_connection_dropped_while_idle_is_replaced_before_use(
    settings: Settings, own_pg_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth = _caller(own_pg_database)
    with TestClient(create_app(settings, own_pg_database)) as client:
        assert client.get("/api/v1/me", headers=auth).status_code == 200
        _drop_connections(own_pg_database)
        later = app_db.monotonic() + app_db.PING_AFTER_IDLE_S
        monkeypatch.setattr(app_db, "monotonic", lambda: later)
        assert client.get("/api/v1/me", headers=auth).status_code == 200


def test_a_connection_dropped_just_after_use_costs_a_503_not_a_500(
    settings: Settings, own_pg_database: Database
) -> None:
    auth = _caller(own_pg_database)
    with TestClient(create_app(settings, own_pg_database)) as client:
        assert client.get("/api/v1/me", headers=auth).status_code == 200
        _drop_connections(own_pg_database)
        answers = [client.get("/api/v1/me", headers=auth) for _ in range(3)]
    statuses = [a.status_code for a in answers]
    assert set(statuses) <= {200, 503} and statuses[-1] == 200, statuses
    assert all(a.headers.get("Retry-After") for a in answers if a.status_code == 503)


def _products(db: Session) -> set[str]:
    return set(db.scalars(select(GpuClass.product)))


_KEPT_PRODUCTS = Kept("test_products", (GpuClass,), _products, max_age=2.0)


def test_kept_figures_show_another_connections_change_within_their_age_and_a_local_one_at_once(
    db: Session,
) -> None:
    factories.gpu_class(db, "A")
    db.commit()
    assert "A" in _KEPT_PRODUCTS.get(db, clock=lambda: 1000.0)
    # Written past the session (as another process would): the kept figures hold until 2 s old.
    db.connection().execute(text(
        "INSERT INTO gpu_classes (product, display_name, memory_mib, declared_by_admin, "
        "created_at) VALUES ('B', 'B', 0, false, now())"))
    assert "B" not in _KEPT_PRODUCTS.get(db, clock=lambda: 1001.9)
    assert "B" in _KEPT_PRODUCTS.get(db, clock=lambda: 1002.1)
    # Flushed through a session of this process: read again at once, in this session too.
    factories.gpu_class(db, "C")
    assert "C" in _KEPT_PRODUCTS.get(db, clock=lambda: 1002.2)
    db.rollback()
    assert "C" not in _KEPT_PRODUCTS.get(db, clock=lambda: 1002.3)


def test_a_processes_time_limits_are_set_on_every_connection_it_opens(
        own_pg_database: Database) -> None:
    limits = app_db.TimeLimits(lock_wait=1.5, statement=30, idle_in_transaction=0)
    bounded = Database(own_pg_database.url, limits)
    try:
        with bounded.engine.connect() as connection:
            shown = [connection.execute(text(f"SHOW {name}")).scalar_one() for name in (
                "lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout")]
    finally:
        bounded.dispose()
    assert shown == ["1500ms", "30s", "0"]


def test_a_row_held_past_the_lock_timeout_is_a_contended_error_not_a_wait(
        own_pg_database: Database) -> None:
    with own_pg_database.transaction() as session:
        gpu_id = factories.gpu_class(session).id
    bounded = Database(own_pg_database.url, app_db.TimeLimits(0.2, 0, 0))
    try:
        with own_pg_database.session() as holder, bounded.session() as waiter:
            assert lock_row(holder, GpuClass, gpu_id) is not None
            with pytest.raises(DBAPIError) as refused:
                lock_row(waiter, GpuClass, gpu_id)
            assert contended(refused.value)
    finally:
        bounded.dispose()


def test_a_statement_past_the_statement_timeout_is_cancelled_not_waited_for(
        own_pg_database: Database) -> None:
    bounded = Database(own_pg_database.url, app_db.TimeLimits(0, 0.1, 0))
    try:
        with bounded.session() as session, pytest.raises(DBAPIError) as cancelled:
            session.execute(text("SELECT pg_sleep(5)"))
        assert timed_out(cancelled.value) and not contended(cancelled.value)
    finally:
        bounded.dispose()
