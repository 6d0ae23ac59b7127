"""The invariants the database itself holds, on PostgreSQL and on the SQLite default."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.database.core import Database, utcnow
from app.tenants.models import Tenant
from tests import factories


@pytest.fixture(params=["postgresql", "sqlite"])
def session(request: pytest.FixtureRequest) -> Iterator[Session]:
    fixture = "database" if request.param == "postgresql" else "sqlite_database"
    database: Database = request.getfixturevalue(fixture)
    with database.session() as db:
        yield db


def _violates(db: Session) -> bool:
    try:
        with db.begin_nested():
            db.flush()
    except IntegrityError:
        return True
    return False


def test_tenant_slug_is_unique(session: Session) -> None:
    factories.tenant(session, "acme")
    session.add(Tenant(slug="acme", display_name="Another Acme"))
    assert _violates(session)


def test_tenant_state_is_constrained(session: Session) -> None:
    session.add(Tenant(slug="odd", display_name="Odd", state="deleted"))
    assert _violates(session)


def test_a_node_is_assigned_to_one_tenant_at_most(session: Session) -> None:
    host = factories.host_cluster(session)
    node = factories.node(session, host, factories.gpu_class(session))
    first, second = factories.tenant(session), factories.tenant(session)
    factories.assignment(session, node, first)
    with pytest.raises(IntegrityError), session.begin_nested():
        factories.assignment(session, node, second)


def test_an_ended_assignment_frees_the_node(session: Session) -> None:
    host = factories.host_cluster(session)
    node = factories.node(session, host, factories.gpu_class(session))
    first, second = factories.tenant(session), factories.tenant(session)
    ended = factories.assignment(session, node, first)
    ended.ended_at = utcnow()
    session.flush()
    assert factories.assignment(session, node, second).id != ended.id


def test_quota_cannot_be_negative(session: Session) -> None:
    gpu = factories.gpu_class(session)
    with pytest.raises(IntegrityError), session.begin_nested():
        factories.quota(session, factories.tenant(session), gpu, gpus=-1)


def test_one_quota_row_per_tenant_and_class(session: Session) -> None:
    gpu, tenant = factories.gpu_class(session), factories.tenant(session)
    factories.quota(session, tenant, gpu, gpus=4)
    with pytest.raises(IntegrityError), session.begin_nested():
        factories.quota(session, tenant, gpu, gpus=2)


def test_cluster_names_are_unique_per_tenant_only(session: Session) -> None:
    host = factories.host_cluster(session)
    acme, globex = factories.tenant(session), factories.tenant(session)
    factories.cluster(session, acme, host, "train")
    factories.cluster(session, globex, host, "train")
    with pytest.raises(IntegrityError), session.begin_nested():
        factories.cluster(session, acme, host, "train")


def test_cluster_placement_is_constrained(session: Session) -> None:
    host, tenant = factories.host_cluster(session), factories.tenant(session)
    with pytest.raises(IntegrityError), session.begin_nested():
        factories.cluster(session, tenant, host, "x", placement="anywhere")


def test_foreign_keys_are_enforced(session: Session) -> None:
    gpu = factories.gpu_class(session)
    with pytest.raises(IntegrityError), session.begin_nested():
        factories.quota(session, Tenant(id=999_999, slug="ghost", display_name="g"), gpu, 1)


def test_times_come_back_as_utc(session: Session) -> None:
    tenant = factories.tenant(session)
    tenant.created_at = datetime(2026, 5, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    session.flush()
    session.expire_all()
    stored = session.get(Tenant, tenant.id)
    assert stored is not None
    assert stored.created_at == datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    assert stored.created_at.tzinfo is not None


def test_naive_datetimes_are_refused(session: Session) -> None:
    tenant = factories.tenant(session)
    tenant.created_at = datetime(2026, 5, 1, 12, 0)
    with pytest.raises(Exception, match="naive datetime"), session.begin_nested():
        session.flush()
