"""What one read of the tenant lists and pages costs: the same statements for 3 rows as for
30, within each endpoint's budget, and no write."""

from __future__ import annotations

import itertools

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.database.core import Database
from tests import factories
from tests.support import oidc
from tests.support.principals import bearer
from tests.support.sql import assert_flat, at_two_sizes, one_request
from tests.support.tenancy import signed_in_admin_of
from tests.support.web import HTML


def test_the_tenant_list(client: TestClient, db: Session, database: Database) -> None:
    auth = bearer(db, factories.user(db, admin=True))
    costs = at_two_sizes(db, lambda: factories.tenant(db), lambda: one_request(
        database, client, "/api/v1/tenants?limit=100", auth))
    assert_flat(*costs, budget=4)


def test_the_members_list(client: TestClient, db: Session, database: Database) -> None:
    acme, admin = factories.tenant(db, "acme"), factories.user(db)
    factories.membership(db, acme, admin, "admin")
    auth = bearer(db, admin)
    costs = at_two_sizes(db, lambda: factories.membership(db, acme, factories.user(db)),
                         lambda: one_request(database, client, "/api/v1/tenants/acme/members",
                                             auth))
    assert_flat(*costs, budget=5)


def test_the_members_page(client: TestClient, db: Session, database: Database,
                          oidc_issuer: str) -> None:
    acme = factories.tenant(db, "acme")
    signed_in_admin_of(client, db, oidc_issuer, acme)
    costs = at_two_sizes(db, lambda: factories.membership(db, acme, factories.user(db)),
                         lambda: one_request(database, client, "/t/acme/members", HTML))
    assert_flat(*costs, budget=5)


def test_the_platform_admins_tenants_page(client: TestClient, db: Session,
                                          database: Database) -> None:
    oidc.sign_in(client, "admin@example.com")
    costs = at_two_sizes(db, lambda: factories.tenant(db), lambda: one_request(
        database, client, "/admin/tenants", HTML))
    assert_flat(*costs, budget=4)


def test_the_tenant_dashboard(client: TestClient, db: Session, database: Database,
                              oidc_issuer: str) -> None:
    """Clusters, quota of many classes held by clusters and dedicated nodes, and requests by
    different people: each shown in one statement."""
    acme = factories.tenant(db, "acme")
    signed_in_admin_of(client, db, oidc_issuer, acme)
    host = factories.host_cluster(db)
    numbers = itertools.count()

    def add() -> None:
        n = next(numbers)
        gpu = factories.gpu_class(db, f"GPU-{n}")
        factories.quota(db, acme, gpu, gpus=16)
        factories.cluster(db, acme, host, f"c{n}", gpu_class_id=gpu.id, gpus=2)
        factories.assignment(db, factories.node(db, host, gpu), acme)
        factories.quota_request(db, acme, gpu, factories.user(db))

    costs = at_two_sizes(db, add, lambda: one_request(database, client, "/t/acme", HTML))
    assert_flat(*costs, budget=7)
