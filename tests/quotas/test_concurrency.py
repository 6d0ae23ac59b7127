"""Parallel approvals against a real, separately committed database: no double decision, and
guaranteed quota never passes a class's capacity without an explicit overcommit."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from sqlalchemy import func, select

from app.audit.models import AuditEvent
from app.auth.principal import Principal
from app.database.core import Database
from app.quotas import service
from app.quotas.models import QuotaRequest, TenantQuota
from app.quotas.schemas import ApproveIn, RejectIn
from tests import factories
from tests.support.parallel import run_in_parallel

THREADS = 50


def _seed(database: Database, *, requests: int, gpus_each: int,
          capacity_nodes: int) -> tuple[Principal, list[Principal], list[int], int]:
    with database.transaction() as db:
        admins = [factories.user(db, admin=True) for _ in range(2)]
        gpu = factories.gpu_class(db)
        host = factories.host_cluster(db)
        for _ in range(capacity_nodes):
            factories.node(db, host, gpu, gpu_count=8)
        tenants = [factories.tenant(db) for _ in range(5)]
        rows = [QuotaRequest(tenant_id=tenants[i % 5].id, gpu_class_id=gpu.id, gpus=gpus_each,
                             reason="parallel") for i in range(requests)]
        db.add_all(rows)
        db.flush()
        principals = [Principal(user=a, via="token") for a in admins]
        return principals[0], principals, [r.id for r in rows], gpu.id




def _figures(database: Database, gpu_class_id: int) -> tuple[int, Counter[str], Counter[str]]:
    with database.session() as db:
        guaranteed = db.scalar(select(func.coalesce(func.sum(TenantQuota.gpus), 0)).where(
            TenantQuota.gpu_class_id == gpu_class_id)) or 0
        states = Counter(db.scalars(select(QuotaRequest.state)))
        actions = Counter(db.scalars(select(AuditEvent.action)))
        return int(guaranteed), states, actions


def test_50_parallel_approvals_never_exceed_capacity(own_pg_database: Database) -> None:
    principal, _, ids, gpu_class_id = _seed(own_pg_database, requests=THREADS, gpus_each=4,
                                            capacity_nodes=8)  # 64 GPUs: room for 16 requests

    def approve(request_id: int) -> Callable[..., object]:
        return lambda db: service.approve(db, principal, request_id, ApproveIn())

    outcomes = (run_in_parallel(own_pg_database, [approve(i) for i in ids]))
    guaranteed, states, actions = _figures(own_pg_database, gpu_class_id)
    assert outcomes == {"ok": 16, "conflict": 34}
    assert guaranteed == 64
    assert states == {"approved": 16, "pending": 34}
    assert actions["quota_request.approve"] == actions["tenant_quota.change"] == 16


def test_two_admins_deciding_the_same_request_decide_it_once(own_pg_database: Database) -> None:
    _, admins, ids, gpu_class_id = _seed(own_pg_database, requests=1, gpus_each=4,
                                         capacity_nodes=8)
    [request_id] = ids
    calls: list[Callable[..., object]] = []
    for n in range(20):
        admin = admins[n % 2]
        if n % 4 == 3:
            calls.append(lambda db, a=admin: service.reject(db, a, request_id, RejectIn()))
        else:
            calls.append(lambda db, a=admin: service.approve(db, a, request_id, ApproveIn()))
    outcomes = (run_in_parallel(own_pg_database, calls))
    guaranteed, states, actions = _figures(own_pg_database, gpu_class_id)
    assert outcomes == {"ok": 1, "conflict": 19}
    decisions = actions["quota_request.approve"] + actions["quota_request.reject"]
    assert decisions == 1
    assert guaranteed == (4 if states["approved"] else 0)
    assert actions["tenant_quota.change"] == states["approved"]


@pytest.mark.sqlite
def test_parallel_approvals_on_sqlite_are_serialised_too(sqlite_database: Database) -> None:
    principal, _, ids, gpu_class_id = _seed(sqlite_database, requests=12, gpus_each=4,
                                            capacity_nodes=2)  # 16 GPUs: room for 4 requests

    def approve(request_id: int) -> Callable[..., object]:
        return lambda db: service.approve(db, principal, request_id, ApproveIn())

    calls = [approve(i) for i in ids] + [approve(ids[0]) for _ in range(4)]
    outcomes = (run_in_parallel(sqlite_database, calls))
    guaranteed, states, actions = _figures(sqlite_database, gpu_class_id)
    assert outcomes == {"ok": 4, "conflict": 12}
    assert guaranteed == 16
    assert states["approved"] == 4
    assert actions["quota_request.approve"] == actions["tenant_quota.change"] == 4
