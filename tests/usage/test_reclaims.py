"""Pods KAI evicts from a tenant's cluster reach the tenant's audit trail once each: which pod,
why, its own queue's figures; never the tenant the GPUs went to."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from app.audit.models import AuditEvent
from app.database.core import Database
from app.kube.manifests.names import host_namespace_name
from app.kube.memory import InMemoryKube
from app.usage.models import GpuReclaim
from tests.support.drive import run_due
from tests.support.tenancy import build_tenancy
from tests.usage.support import LedgerClock, approve_quota, create_cluster, fix_clock
from tests.usage.test_sampler import sampler


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


def evict_event(uid: str, namespace: str, pod: str, action: str = "reclaim") -> dict[str, Any]:
    """As KAI's scheduler records it on the evicted pod's group."""
    message = (f"Pod {namespace}/{pod} was preempted by workload t-globex--serve/pg-serve-0.\n"
               "acme uses <gpu: 8> with a quota of <gpu: 2>, fair-share of <gpu: 8> and queue "
               "priority of <100>.\n"
               "globex uses <gpu: 0> with a quota of <gpu: 4>, fair-share of <gpu: 4> and "
               "queue priority of <100>.")
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"pg.{uid}", "namespace": namespace, "uid": uid,
                         "annotations": {"evictor-action-type": action,
                                         "evictor-pod-group-namespace": "t-globex--serve"}},
            "involvedObject": {"kind": "PodGroup", "namespace": namespace, "name": f"pg-{pod}"},
            "reason": "Evict", "message": message, "lastTimestamp": "2026-11-02T00:00:05Z"}


def test_each_reclaimed_pod_is_audited_once_for_its_tenant_without_the_other_tenant(
        database: Database, clock: LedgerClock) -> None:
    with database.transaction() as db:
        t = build_tenancy(db)
        approve_quota(db, t, 8)
        train_id = create_cluster(db, t, "train", 2)
        acme_id = t.acme.id
    namespace = host_namespace_name("acme", "train")
    host = InMemoryKube()
    host.seed(evict_event("e1", namespace, "sweep-abc-x-default-x-train"))
    host.seed(evict_event("e2", namespace, "sweep-def-x-default-x-train"))
    host.seed(evict_event("e3", "t-nobody--here", "x-x-default-x-here"))  # not the portal's
    worker = sampler(database, host)
    run_due(worker, "w")
    clock.at(seconds=120)
    run_due(worker, "w")  # the same events again: nothing new
    with database.session() as db:
        rows = db.scalars(select(AuditEvent).where(
            AuditEvent.action == "cluster.gpu_reclaimed").order_by(AuditEvent.id)).all()
        reclaims = db.scalars(select(GpuReclaim)).all()
    assert [(r.tenant_id, r.target_id, r.actor_label) for r in rows] == [
        (acme_id, str(train_id), "kai-scheduler")] * 2
    assert [r.after["pod"] for r in rows if r.after] == ["sweep-abc", "sweep-def"]
    first = rows[0].after or {}
    assert first["why"].startswith("borrowed GPUs taken back")
    assert first["queue"].startswith("acme uses <gpu: 8> with a quota of <gpu: 2>")
    assert "globex" not in str([r.after for r in rows])
    assert {(r.cluster_id, r.action) for r in reclaims} == {(train_id, "reclaim")}
