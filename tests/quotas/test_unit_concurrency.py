"""Parallel approvals of slices and of shares against a real, separately committed database:
what is guaranteed never passes the free slices of the profile or the free hundredths of a
GPU without an explicit overcommit (the class lock serialises them as it does whole GPUs)."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import func, select

from app.auth.principal import Principal
from app.database.core import Database
from app.quotas import service
from app.quotas.models import QuotaRequest, TenantQuota
from app.quotas.schemas import ApproveIn
from tests import factories
from tests.support.parallel import run_in_parallel

THREADS = 20


def _seed(database: Database, unit: str, profile: str, amount: int) -> tuple[Principal,
                                                                             list[int], int]:
    with database.transaction() as db:
        admin = factories.user(db, admin=True)
        gpu = factories.gpu_class(db, share_step=25)
        host = factories.host_cluster(db)
        if unit == "mig":
            factories.node(db, host, gpu, gpu_count=0, mig_strategy="mixed",
                           mig_resources={"nvidia.com/mig-1g.10gb": 14})
        else:
            factories.node(db, host, gpu, gpu_count=8)
        tenants = [factories.tenant(db) for _ in range(5)]
        rows = [QuotaRequest(tenant_id=tenants[i % 5].id, gpu_class_id=gpu.id, gpus=0,
                             unit=unit, mig_profile=profile, amount=amount, reason="parallel")
                for i in range(THREADS)]
        db.add_all(rows)
        db.flush()
        return Principal(user=admin, via="token"), [r.id for r in rows], gpu.id


def _approved_in_steps(database: Database, gpu_class_id: int) -> int:
    with database.session() as db:
        return int(db.scalar(select(func.coalesce(func.sum(TenantQuota.amount), 0)).where(
            TenantQuota.gpu_class_id == gpu_class_id)) or 0)


def _approve_all(database: Database, principal: Principal, ids: list[int]) -> object:
    def approve(request_id: int) -> Callable[..., object]:
        return lambda db: service.approve(db, principal, request_id, ApproveIn())

    return run_in_parallel(database, [approve(i) for i in ids])


def test_parallel_approvals_of_slices_never_pass_the_free_slices(
        own_pg_database: Database) -> None:
    principal, ids, gpu_class_id = _seed(own_pg_database, "mig", "1g.10gb", 2)
    outcomes = _approve_all(own_pg_database, principal, ids)
    assert outcomes == {"ok": 7, "conflict": 13}  # 14 slices: room for 7 requests of 2
    assert _approved_in_steps(own_pg_database, gpu_class_id) == 14


def test_parallel_approvals_of_shares_never_pass_the_free_hundredths(
        own_pg_database: Database) -> None:
    principal, ids, gpu_class_id = _seed(own_pg_database, "share", "", 75)
    outcomes = _approve_all(own_pg_database, principal, ids)
    assert outcomes == {"ok": 10, "conflict": 10}  # 8 GPUs: room for ten shares of 0.75
    assert _approved_in_steps(own_pg_database, gpu_class_id) == 750
