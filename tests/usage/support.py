"""A fixed clock for the ledger, and the steps of a tenant's day through the real services."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.clusters import conditions as cond
from app.clusters import repository as cluster_rows
from app.clusters import service as clusters
from app.clusters.models import VirtualCluster
from app.clusters.schemas import ClusterCreate, ClusterResize
from app.database.core import Database
from app.kit.config import Settings
from app.kube.connector import ClientConnector
from app.quotas import service as quotas
from app.quotas.models import QuotaRequest
from app.quotas.schemas import ApproveIn, QuotaRequestCreate
from app.reconcilers.clusters import ClusterReconciler
from app.usage import ledger
from app.usage import service as usage
from app.usage.models import LedgerEntry
from app.usage.schemas import UsageFilters, UsageReport
from tests.clusters.support import Clock, cluster_settings
from tests.support.drive import run_due
from tests.support.tenancy import Tenancy

T0 = datetime(2026, 11, 2, tzinfo=UTC)  # a Monday, midnight UTC


class LedgerClock:
    """The time the ledger stamps on its entries and reports up to; moved by the test."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def at(self, **offset: float) -> LedgerClock:
        self.now = T0 + timedelta(**offset)
        return self


def fix_clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    clock = LedgerClock()
    monkeypatch.setattr(ledger, "utcnow", clock)
    return clock


def approve_quota(db: Session, t: Tenancy, gpus: int, slug: str = "acme",
                  requester: Principal | None = None) -> QuotaRequest:
    asked = quotas.create_request(db, requester or t.principal(t.acme_admin),
                                  Settings(env="test"), slug,
                                  QuotaRequestCreate(gpu_class_id=t.h100.id, gpus=gpus,
                                                     reason="training"))
    quotas.approve(db, t.principal(t.platform_admin), asked.id, ApproveIn())
    request = db.get(QuotaRequest, asked.id)
    assert request is not None
    return request


def create_cluster(db: Session, t: Tenancy, name: str, gpus: int, slug: str = "acme",
                   principal: Principal | None = None) -> int:
    payload = ClusterCreate(name=name, gpu_class_id=t.h100.id, gpus=gpus)
    return clusters.create_cluster(db, principal or t.principal(t.acme_admin),
                                   cluster_settings(), slug, payload).id


def resize_cluster(db: Session, t: Tenancy, name: str, gpus: int, slug: str = "acme",
                   principal: Principal | None = None) -> None:
    clusters.resize_cluster(db, principal or t.principal(t.acme_admin), slug, name,
                            ClusterResize(gpus=gpus))


def delete_cluster(db: Session, t: Tenancy, name: str, slug: str = "acme",
                   principal: Principal | None = None) -> None:
    clusters.delete_cluster(db, principal or t.principal(t.acme_admin), slug, name)


def fall_asleep(db: Session, t: Tenancy, clock: LedgerClock, name: str, **at: float) -> None:
    """A tenant admin asks a little before; the worker has the cluster asleep ``at``."""
    clock.at(**{**at, "minutes": at.get("minutes", 0) - 5})
    clusters.change_power(db, t.principal(t.acme_admin), "acme", name, "asleep")
    clock.at(**at)
    cluster = cluster_named(db, name)
    cluster.asleep_since = clock.now  # as the worker writes it, through the ORM
    db.flush()


def wake(db: Session, t: Tenancy, clock: LedgerClock, name: str, **at: float) -> None:
    """Asked, then the worker has it awake ``at``: its status write, a bulk UPDATE."""
    clusters.change_power(db, t.principal(t.acme_admin), "acme", name, "awake")
    clock.at(**at)
    cluster_rows.update_status(db, cluster_named(db, name).id, asleep_since=None)


def cluster_named(db: Session, name: str) -> VirtualCluster:
    return db.scalars(select(VirtualCluster).where(VirtualCluster.name == name)).one()


def report(db: Session, principal: Principal, *, days: int = 1, tenant: str | None = None,
           group_by: str = "day", start: datetime = T0) -> UsageReport:
    filters = UsageFilters.model_validate({"start": start, "end": start + timedelta(days=days),
                                           "tenant": tenant, "group_by": group_by})
    return usage.report(db, principal, filters)


def entries(db: Session, kind: str | None = None) -> list[tuple[str, str, int, datetime]]:
    """(kind, cluster name, GPUs, at) of every ledger entry, oldest first."""
    query = select(LedgerEntry).order_by(LedgerEntry.id)
    if kind is not None:
        query = query.where(LedgerEntry.kind == kind)
    return [(e.kind, e.cluster_name, e.gpus, e.at) for e in db.scalars(query)]


def reconcile_until_ready(settings: Settings, database: Database, cluster_id: int) -> None:
    """The real cluster reconciler's passes (a resync apart) until the cluster is Ready."""
    clock = Clock()
    reconciler = ClusterReconciler(settings, database, ClientConnector(settings), clock=clock,
                                   wait_seconds=0.5)
    conditions: list[dict[str, Any]] = []
    for _ in range(4):
        clock.advance(301)
        run_due(reconciler, "worker-1")
        with database.session() as db:
            cluster = db.scalar(select(VirtualCluster).where(VirtualCluster.id == cluster_id))
            conditions = list(cluster.conditions or []) if cluster else []
        if cond.is_true(conditions, cond.READY):
            return
    raise AssertionError(f"not Ready: {conditions}")
