"""Hot reads and one-row inserts run on the driver's cursor (``app.database.prepared``): the
same rows as through the session, in the session's transaction, heard by statement listeners,
refused in a read-only session, and a lost connection handled as SQLAlchemy handles one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import JSON, Column, Integer, MetaData, String, Table, bindparam, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.auth import principal_cache
from app.auth.models import ApiToken, User
from app.clusters.models import VirtualCluster
from app.database.core import Database, ReadOnlyViolation, UTCDateTime, utcnow
from app.database.prepared import OneOf, Prepared, PreparedInsert
from app.hosts.models import HostCluster
from app.quotas import regions
from tests import factories
from tests.support import postgres
from tests.support.sql import statements_during

SET_AT = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
HOSTS = Prepared(
    select(HostCluster.id, HostCluster.name, HostCluster.credentials_set_at,
           HostCluster.kube_qps, HostCluster.health_checks, HostCluster.is_default,
           HostCluster.region.label("where"))
    .where(HostCluster.credentials_set_at >= bindparam("since", type_=UTCDateTime()),
           HostCluster.name.startswith(bindparam("prefix")))
    .order_by(HostCluster.name))


def _add_hosts(db: Session) -> None:
    for name, qps, checks in (("pp-a", 2.5, [{"ok": True, "at": "x"}]), ("pp-b", None, [])):
        host = factories.host_cluster(db, name, region="eu-west")
        host.credentials_set_at = SET_AT
        host.kube_qps = qps
        host.health_checks = checks
    db.flush()


def _read(db: Session) -> list[Any]:
    return HOSTS.rows(db, {"since": SET_AT - timedelta(days=1), "prefix": "pp-"})


@pytest.fixture(params=["database", "sqlite_database"])
def with_hosts(request: pytest.FixtureRequest) -> Database:
    """PostgreSQL (the driver's cursor) and SQLite (the session), each holding two hosts."""
    chosen: Database = request.getfixturevalue(request.param)
    with chosen.transaction() as db:
        _add_hosts(db)
    return chosen


def test_a_prepared_read_gives_the_rows_the_session_gives(with_hosts: Database) -> None:
    with with_hosts.read_session() as db:
        rows = _read(db)
        through_session = db.execute(HOSTS.query, {"since": SET_AT - timedelta(days=1),
                                                   "prefix": "pp-"}).all()
    assert [tuple(row) for row in rows] == [tuple(row) for row in through_session]
    first = rows[0]
    assert (first.name, first[1], first._mapping["where"]) == ("pp-a", "pp-a", "eu-west")
    assert first.credentials_set_at == SET_AT
    assert first.credentials_set_at.utcoffset() == timedelta(0)
    assert first.health_checks == [{"ok": True, "at": "x"}] and first.kube_qps == 2.5
    assert [row.name for row in rows] == ["pp-a", "pp-b"]
    with with_hosts.read_session() as db:
        assert HOSTS.rows(db, {"since": SET_AT + timedelta(seconds=1), "prefix": "pp-"}) == []


def test_a_prepared_read_sees_its_sessions_uncommitted_work_and_is_heard_by_listeners(
    database: Database, db: Session
) -> None:
    _add_hosts(db)  # flushed, not committed: only this session's transaction has them
    db.add(HostCluster(name="pp-c", is_default=False, credentials_set_at=SET_AT))  # pending
    seen = statements_during(database, lambda: _read(db))
    assert [row.name for row in _read(db)] == ["pp-a", "pp-b", "pp-c"]
    assert [s.split()[0] for s in seen] == ["INSERT", "SELECT"]  # flushed first, as SQLAlchemy
    assert "FROM host_clusters" in seen[1]


def test_a_list_of_values_bound_by_one_of_matches_each_value_and_an_empty_list_none(
    with_hosts: Database,
) -> None:
    named = Prepared(select(HostCluster.name).where(OneOf(HostCluster.id, "ids"))
                     .order_by(HostCluster.name))
    with with_hosts.read_session() as db:
        ids = {host.name: host.id for host in db.scalars(select(HostCluster))}
        assert [r.name for r in named.rows(db, {"ids": [ids["pp-b"], 0, ids["pp-a"]]})] == [
            "pp-a", "pp-b"]
        assert [r.name for r in named.rows(db, {"ids": [ids["pp-b"]]})] == ["pp-b"]
        assert named.rows(db, {"ids": []}) == []


def test_entities_and_in_lists_go_through_the_session(db: Session) -> None:
    _add_hosts(db)
    entities = Prepared(select(HostCluster).where(HostCluster.name == bindparam("name")))
    in_list = Prepared(select(HostCluster.name).where(
        HostCluster.name.in_(bindparam("names", expanding=True))).order_by(HostCluster.name))
    assert entities.rows(db, {"name": "pp-b"})[0][0].region == "eu-west"
    assert [r.name for r in in_list.rows(db, {"names": ["pp-b", "pp-a", "nope"]})] == ["pp-a",
                                                                                         "pp-b"]


def test_a_connection_lost_under_a_prepared_read_is_a_database_error_and_the_next_read_works(
    own_pg_database: Database,
) -> None:
    with own_pg_database.transaction() as db:
        _add_hosts(db)
    with own_pg_database.read_session() as db:
        assert len(_read(db)) == 2
    with psycopg.connect(postgres.ADMIN_DSN, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE datname = %s AND pid <> pg_backend_pid()",
                      (own_pg_database.engine.url.database,))
    with own_pg_database.read_session() as db, pytest.raises(DBAPIError) as lost:
        _read(db)
    assert lost.value.connection_invalidated
    with own_pg_database.read_session() as db:
        assert len(_read(db)) == 2


NOTES = Table("prepared_insert_notes", MetaData(),
              Column("id", Integer, primary_key=True),
              Column("note", String(20), default="untitled"),
              Column("at", UTCDateTime(), default=utcnow),
              Column("body", JSON),
              Column("seq", Integer, server_default=text("7")))
ADD_NOTE = PreparedInsert(NOTES, returning=list(NOTES.columns))


@pytest.fixture(params=["database", "sqlite_database"])
def with_notes(request: pytest.FixtureRequest) -> Database:
    """PostgreSQL (the driver's cursor) and SQLite (the session), with the notes' table."""
    chosen: Database = request.getfixturevalue(request.param)
    with chosen.transaction() as db:
        NOTES.create(db.connection())
    return chosen


def test_a_prepared_insert_stores_the_row_with_its_defaults_and_answers_it_as_stored(
    with_notes: Database,
) -> None:
    before = utcnow()
    with with_notes.transaction() as db:
        added = ADD_NOTE.add(db, {"body": {"gpus": [1, 2], "name": "ß"}})
    with with_notes.read_session() as db:
        stored = db.execute(select(NOTES).where(NOTES.c.id == added.id)).one()
    assert tuple(added) == tuple(stored)
    assert (added.note, added.body, added.seq) == ("untitled", {"gpus": [1, 2], "name": "ß"}, 7)
    assert before <= added.at <= utcnow() and added.at.utcoffset() == timedelta(0)


def test_a_prepared_insert_refuses_a_column_it_cannot_give_and_writes_nothing(
    with_notes: Database,
) -> None:
    with with_notes.transaction() as db:
        for wrong in ({"seq": 1}, {"colour": "red"}):
            with pytest.raises(ValueError, match="no column"):
                ADD_NOTE.add(db, wrong)
        assert db.execute(select(NOTES)).all() == []


def test_a_read_only_session_refuses_a_prepared_insert(with_notes: Database) -> None:
    with with_notes.read_session() as db, pytest.raises(ReadOnlyViolation):
        ADD_NOTE.add(db, {"note": "sneaky"})
    with with_notes.read_session() as db:
        assert db.execute(select(NOTES)).all() == []


def test_a_prepared_insert_flushes_what_is_pending_first_and_rolls_back_with_its_session(
    database: Database,
) -> None:
    with database.transaction() as db:
        NOTES.create(db.connection())
    without_returning = PreparedInsert(NOTES)
    with database.session() as db:
        db.add(HostCluster(name="pp-c", is_default=False))  # pending
        seen = statements_during(database, lambda: without_returning.add(db, {"note": "x"}))
        assert [s.split()[2] for s in seen if s.startswith("INSERT")] == [
            "host_clusters", "prepared_insert_notes"]
        assert without_returning.add(db, {"note": "y"}) is None
        db.rollback()
    with database.read_session() as db:
        assert db.execute(select(NOTES)).all() == []
        assert db.scalar(select(HostCluster).where(HostCluster.name == "pp-c")) is None


_HOSTS_TABLE: Table = HostCluster.__table__  # type: ignore[assignment]
_USERS_TABLE: Table = User.__table__  # type: ignore[assignment]
_TOKENS_TABLE: Table = ApiToken.__table__  # type: ignore[assignment]


@pytest.fixture(params=["database", "sqlite_database"])
def either(request: pytest.FixtureRequest) -> Database:
    chosen: Database = request.getfixturevalue(request.param)
    return chosen


def test_kept_figures_are_read_afresh_once_a_prepared_insert_adds_to_a_table_they_watch(
        either: Database) -> None:
    """A region's first host, added on the driver's cursor, is a region at once: in the adding
    session before its commit, and in every session after it (not after the kept figures'
    two seconds)."""
    add_host = PreparedInsert(_HOSTS_TABLE, returning=[_HOSTS_TABLE.c.id])
    with either.transaction() as db:
        factories.host_cluster(db, "pp-first", region="eu-west")
    with either.read_session() as db:
        assert regions.fleet_regions(db) == ["eu-west"]
    with either.transaction() as db:
        add_host.add(db, {"name": "pp-second", "region": "us-east"})
        assert regions.fleet_regions(db) == ["eu-west", "us-east"]
    with either.read_session() as db:
        assert regions.fleet_regions(db) == ["eu-west", "us-east"]


def test_a_prepared_insert_of_a_caller_row_marks_the_principal_caches_stale_but_a_new_token_not(
        either: Database) -> None:
    """A new user row may change who a caller is (cached answers are dropped on its commit); a
    new API token changes no answer already cached."""
    add_user = PreparedInsert(_USERS_TABLE, returning=[_USERS_TABLE.c.id])
    add_token = PreparedInsert(_TOKENS_TABLE, returning=[_TOKENS_TABLE.c.id])
    with either.session() as db:
        add_user.add(db, {"email": "pp@example.com"})
        assert principal_cache.changes_pending(db)
        db.rollback()
    with either.transaction() as db:
        owner = factories.user(db, "pp-owner@example.com")
    with either.session() as db:
        add_token.add(db, {"user_id": owner.id, "name": "pp", "token_hash": "x" * 64,
                           "prefix": "pp"})
        assert not principal_cache.changes_pending(db)
        db.rollback()


def test_a_prepared_insert_of_a_tracked_row_without_its_columns_is_refused(db: Session) -> None:
    """The usage ledger records a new cluster from its row: an insert that answers nothing
    would leave the tenant's usage short."""
    tenant = factories.tenant(db, "pp-ledger")
    host = factories.host_cluster(db, "pp-ledger-host")
    add_cluster = PreparedInsert(VirtualCluster.__table__)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="the usage ledger needs the virtual_clusters row"):
        add_cluster.add(db, {"tenant_id": tenant.id, "host_cluster_id": host.id, "name": "c",
                             "kubernetes_version": "1.31", "placement": "shared-pool",
                             "amount": 0})
