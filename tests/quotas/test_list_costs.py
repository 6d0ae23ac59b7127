"""What one read of the quota lists costs: the same statements for 3 rows as for 30, within
each endpoint's budget, and no write."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.database.core import Database
from app.gpu_classes import capacity_cache
from app.tenants.models import Tenant
from tests import factories
from tests.support import oidc
from tests.support.principals import bearer
from tests.support.sql import assert_flat, at_two_sizes, one_request
from tests.support.web import HTML


def _quota_of_a_class(db: Session, tenant: Tenant) -> Callable[[], None]:
    """Each call: quota of a new class, held by a cluster and a dedicated node, and a request
    by someone new."""
    host = factories.host_cluster(db)
    numbers = itertools.count()

    def add() -> None:
        n = next(numbers)
        gpu = factories.gpu_class(db, f"GPU-{tenant.slug}-{n}")
        factories.quota(db, tenant, gpu, gpus=16)
        factories.cluster(db, tenant, host, f"c{n}", gpu_class_id=gpu.id, gpus=2)
        factories.assignment(db, factories.node(db, host, gpu), tenant)
        factories.quota_request(db, tenant, gpu, factories.user(db))
    return add


def _of_many_tenants(db: Session) -> Callable[[], None]:
    return lambda: _quota_of_a_class(db, factories.tenant(db))()


def test_a_tenants_quota_and_its_requests(client: TestClient, db: Session,
                                          database: Database) -> None:
    acme, member = factories.tenant(db, "acme"), factories.user(db)
    factories.membership(db, acme, member, "member")
    auth, add = bearer(db, member), _quota_of_a_class(db, acme)
    for url in ("/api/v1/tenants/acme/quota?limit=100",
                "/api/v1/tenants/acme/quota-requests?limit=100"):
        def read(url: str = url) -> list[str]:
            return one_request(database, client, url, auth)

        assert_flat(*at_two_sizes(db, add, read), budget=5)


def test_the_approval_queue(client: TestClient, db: Session, database: Database) -> None:
    """Requests of many tenants and classes; the classes' capacity summed afresh."""
    auth = bearer(db, factories.user(db, admin=True))
    costs = at_two_sizes(db, _of_many_tenants(db), lambda: one_request(
        database, client, "/api/v1/quota-requests?limit=100", auth,
        before=lambda: capacity_cache.forget(db)))
    assert_flat(*costs, budget=7)


def test_the_approval_queue_page(client: TestClient, db: Session, database: Database) -> None:
    oidc.sign_in(client, "admin@example.com")
    costs = at_two_sizes(db, _of_many_tenants(db), lambda: one_request(
        database, client, "/admin/quota-requests", HTML,
        before=lambda: capacity_cache.forget(db)))
    assert_flat(*costs, budget=7)
