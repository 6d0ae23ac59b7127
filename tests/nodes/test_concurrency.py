"""Parallel assignments against a real, separately committed PostgreSQL: a node goes to one
tenant only, and a tenant's dedicated GPUs never pass its quota."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import func, select

from app.audit.models import AuditEvent
from app.auth.principal import Principal
from app.database.core import Database
from app.hosts.models import HostCluster
from app.http.pagination import PageParams
from app.nodes import service
from app.nodes.models import NodeAssignment
from app.nodes.schemas import AssignmentIn
from tests import factories
from tests.support.parallel import run_in_parallel

Call = Callable[..., object]


def _seed(database: Database, *, tenants: int, quota_gpus: int,
          nodes: int) -> tuple[Principal, list[str], list[str]]:
    with database.transaction() as db:
        admin = factories.user(db, admin=True)
        gpu = factories.gpu_class(db)
        host = HostCluster(name="default", is_default=True)
        db.add(host)
        db.flush()
        names = [factories.node(db, host, gpu, name=f"n{i:02d}", gpu_count=8).name
                 for i in range(nodes)]
        slugs = []
        for i in range(tenants):
            tenant = factories.tenant(db, f"t{i:02d}")
            factories.quota(db, tenant, gpu, gpus=quota_gpus)
            slugs.append(tenant.slug)
        return Principal(user=admin, via="token"), names, slugs




def _assign(principal: Principal, node: str, tenant: str) -> Call:
    return lambda db: service.assign_node(db, principal, node, AssignmentIn(tenant=tenant))


def _figures(database: Database) -> tuple[int, int]:
    with database.session() as db:
        active = db.scalar(select(func.count()).select_from(NodeAssignment).where(
            NodeAssignment.ended_at.is_(None))) or 0
        audited = db.scalar(select(func.count()).select_from(AuditEvent).where(
            AuditEvent.action == "node.assign")) or 0
        return active, audited


def test_50_tenants_racing_for_one_node_leave_it_with_one(own_pg_database: Database) -> None:
    principal, [node], slugs = _seed(own_pg_database, tenants=50, quota_gpus=8, nodes=1)
    outcomes = run_in_parallel(own_pg_database, [_assign(principal, node, s) for s in slugs])
    assert outcomes == {"ok": 1, "conflict": 49}
    assert _figures(own_pg_database) == (1, 1)


def test_parallel_assignments_to_one_tenant_stop_at_its_quota(own_pg_database: Database
                                                              ) -> None:
    principal, nodes, [slug] = _seed(own_pg_database, tenants=1, quota_gpus=40, nodes=20)
    outcomes = run_in_parallel(own_pg_database, [_assign(principal, n, slug) for n in nodes])
    assert outcomes == {"ok": 5, "conflict": 15}
    assert _figures(own_pg_database) == (5, 5)


@pytest.mark.sqlite
def test_the_embedded_sqlite_default_holds_both_rules_too(sqlite_database: Database) -> None:
    principal, nodes, slugs = _seed(sqlite_database, tenants=6, quota_gpus=16, nodes=4)
    race = [_assign(principal, nodes[0], slug) for slug in slugs]
    assert run_in_parallel(sqlite_database, race) == {"ok": 1, "conflict": 5}
    with sqlite_database.session() as db:
        winner = next(s for s in slugs if service.tenant_nodes(
            db, principal, s, PageParams()).items)
    rest = [_assign(principal, n, winner) for n in nodes[1:]]
    assert run_in_parallel(sqlite_database, rest) == {"ok": 1, "conflict": 2}
    assert _figures(sqlite_database) == (2, 2)
