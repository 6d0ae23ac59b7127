"""What one read of the audit log costs: the same statements for 3 events as for 30, with
any filter, within the budget, and no write."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.database.core import Database
from app.tenants.models import Tenant
from tests import factories
from tests.support import oidc
from tests.support.principals import bearer
from tests.support.sql import assert_flat, at_two_sizes, one_request
from tests.support.web import HTML


def _events(db: Session, *, one_tenant: bool) -> tuple[Callable[[], None], Tenant]:
    """Each call: a node.assign event by bob of a new tenant (or of acme)."""
    acme = factories.tenant(db, "acme")

    def add() -> None:
        tenant = acme if one_tenant else factories.tenant(db)
        audit.record(db, action="node.assign", actor_id=None, actor_label="Bob@example.com",
                     tenant_id=tenant.id, target_type="node", target_id="n1", after={"n": 1})
        db.flush()
    return add, acme


@pytest.mark.parametrize("query", [
    "", "tenant=acme", "actor=bob@example.com", "action=node.assign", "action=node.",
])
def test_the_audit_log(query: str, client: TestClient, db: Session,
                       database: Database) -> None:
    add, _ = _events(db, one_tenant="tenant" in query)
    auth = bearer(db, factories.user(db, admin=True))
    costs = at_two_sizes(db, add, lambda: one_request(
        database, client, f"/api/v1/audit?limit=100&{query}", auth))
    assert_flat(*costs, budget=5)


def test_a_tenant_admins_audit_log(client: TestClient, db: Session,
                                   database: Database) -> None:
    """An admin of two tenants reads the events of both."""
    add, acme = _events(db, one_tenant=True)
    admin = factories.user(db)
    factories.membership(db, factories.tenant(db, "globex"), admin, "admin")
    factories.membership(db, acme, admin, "admin")
    auth = bearer(db, admin)
    costs = at_two_sizes(db, add, lambda: one_request(
        database, client, "/api/v1/audit?limit=100", auth))
    assert_flat(*costs, budget=4)


def test_the_audit_page(client: TestClient, db: Session, database: Database) -> None:
    add, _ = _events(db, one_tenant=False)
    oidc.sign_in(client, "admin@example.com")
    costs = at_two_sizes(db, add, lambda: one_request(
        database, client, "/audit?limit=100", HTML))
    assert_flat(*costs, budget=4)
