"""What one read of the node lists, the fleet page and the GPU class lists costs: the same
statements for 3 rows as for 30 (of any filter and order), within each endpoint's budget, and
no write."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.database.core import Database
from app.gpu_classes import capacity_cache
from app.tenants.models import Tenant
from tests import factories
from tests.support import oidc
from tests.support.principals import bearer
from tests.support.sql import assert_flat, at_two_sizes, one_request
from tests.support.tenancy import signed_in_admin_of
from tests.support.web import HTML, htmx


def _fleet(db: Session, *, one_class: bool = False,
           one_tenant: bool = False) -> tuple[Callable[[], None], Tenant]:
    """Each call: a not-ready node in rack r1 of zone z1 with MIG slices, of a new class (or
    the same one) dedicated to a new tenant (or to acme), with quota for it."""
    host = factories.host_cluster(db, "default")
    host.is_default = True
    shared = factories.gpu_class(db, "GPU-A")
    acme = factories.tenant(db, "acme")
    numbers = itertools.count()

    def add() -> None:
        n = next(numbers)
        gpu = shared if one_class else factories.gpu_class(db, f"GPU-{n}")
        tenant = acme if one_tenant else factories.tenant(db)
        node = factories.node(db, host, gpu, f"node-{n:03d}", zone="z1", rack="r1", ready=False,
                              mig_strategy="mixed", mig_resources={"nvidia.com/mig-1g.10gb": 7})
        factories.assignment(db, node, tenant)
        if not one_tenant or n == 0:
            factories.quota(db, tenant, gpu, gpus=64)
    return add, acme


@pytest.mark.parametrize("query", [
    "", "gpu_class=GPU-A", "zone=z1", "rack=r1", "tenant=acme", "ready=false",
    "include_gone=true", "sort=name", "sort=rack", "zone=z1&rack=r1&ready=false&sort=rack",
])
def test_the_node_list(query: str, client: TestClient, db: Session,
                       database: Database) -> None:
    add, _ = _fleet(db, one_class="gpu_class" in query, one_tenant="tenant" in query)
    auth = bearer(db, factories.user(db, admin=True))
    costs = at_two_sizes(db, add, lambda: one_request(
        database, client, f"/api/v1/nodes?limit=100&{query}", auth))
    assert_flat(*costs, budget=5)


def test_the_fleet_page(client: TestClient, db: Session, database: Database) -> None:
    """Capacity of every class summed afresh, the zone picker and a page of nodes."""
    add, _ = _fleet(db)
    oidc.sign_in(client, "admin@example.com")
    costs = at_two_sizes(db, add, lambda: one_request(
        database, client, "/admin/fleet?limit=100", HTML,
        before=lambda: capacity_cache.forget(db)))
    assert_flat(*costs, budget=11)


def test_the_fleet_node_table_swapped_by_htmx(client: TestClient, db: Session,
                                              database: Database) -> None:
    add, _ = _fleet(db)
    oidc.sign_in(client, "admin@example.com")
    costs = at_two_sizes(db, add, lambda: one_request(
        database, client, "/admin/fleet?limit=100&zone=z1&sort=rack", htmx("")))
    assert_flat(*costs, budget=5)


@pytest.mark.parametrize("page", ["/api/v1/gpu-classes?limit=100", "/admin/gpu-classes"])
def test_the_gpu_classes_with_their_capacity(page: str, client: TestClient, db: Session,
                                             database: Database) -> None:
    add, _ = _fleet(db)
    if page.startswith("/api"):
        headers = bearer(db, factories.user(db, admin=True))
    else:
        oidc.sign_in(client, "admin@example.com")
        headers = HTML
    costs = at_two_sizes(db, add, lambda: one_request(
        database, client, page, headers, before=lambda: capacity_cache.forget(db)))
    assert_flat(*costs, budget=7)


@pytest.mark.parametrize("page", ["/api/v1/tenants/acme/nodes?limit=100", "/t/acme/nodes"])
def test_a_tenants_dedicated_nodes(page: str, client: TestClient, db: Session,
                                   database: Database, oidc_issuer: str) -> None:
    add, acme = _fleet(db, one_tenant=True)
    if page.startswith("/api"):
        member = factories.user(db)
        factories.membership(db, acme, member, "viewer")
        headers = bearer(db, member)
    else:
        signed_in_admin_of(client, db, oidc_issuer, acme)
        headers = HTML
    costs = at_two_sizes(db, add, lambda: one_request(database, client, page, headers))
    assert_flat(*costs, budget=5)
