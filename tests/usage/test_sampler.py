"""Use samples from what the host reports, on the in-memory host: which rows they belong to,
used GPU-hours from them, and their folding into hourly means."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.database.core import Database
from app.kube.manifests import labels as lbl
from app.kube.manifests.names import cluster_queue_name, host_namespace_name
from app.kube.memory import InMemoryKube
from app.kube.usage import GpuAsk, pod_gpu_ask
from app.nodes.models import Node
from app.reconcilers.usage import UsageSampler
from app.usage.models import HourlyUsage, UsageSample
from tests import factories
from tests.clusters.support import cluster_settings
from tests.support.drive import run_due
from tests.support.kube import InMemoryConnector
from tests.support.tenancy import Tenancy, build_tenancy
from tests.usage.support import LedgerClock, approve_quota, create_cluster, fix_clock, report


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


def queue(tenant: str, cluster: str, allocated: str, requested: str) -> dict[str, Any]:
    return {"apiVersion": lbl.KAI_API_VERSION, "kind": "Queue",
            "metadata": {"name": cluster_queue_name(tenant, cluster),
                         "labels": lbl.cluster_labels(tenant, cluster)},
            "spec": {"parentQueue": tenant},
            "status": {"allocated": {lbl.GPU_RESOURCE: allocated, "cpu": "2"},
                       "requested": {lbl.GPU_RESOURCE: requested}}}


def quota(tenant: str, cluster: str, used: str, hard: str) -> dict[str, Any]:
    gpus = f"requests.{lbl.GPU_RESOURCE}"
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "tenant-quota", "namespace": host_namespace_name(tenant, cluster),
                         "labels": lbl.cluster_labels(tenant, cluster)},
            "spec": {"hard": {gpus: hard}},
            "status": {"hard": {gpus: hard}, "used": {gpus: used}}}


def pod(name: str, node: str, gpus: int, phase: str = "Running") -> dict[str, Any]:
    container = {"name": "c", "image": "x",
                 "resources": {"limits": {lbl.GPU_RESOURCE: str(gpus)}}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [container]},
            "status": {"phase": phase}}


def sampler(database: Database, host: InMemoryKube, resync: float = 60) -> UsageSampler:
    """A sample stands until the next one, at most two resyncs."""
    return UsageSampler(cluster_settings(worker_resync_seconds=resync), database,
                        InMemoryConnector(host))


def acme_with_a_dedicated_node(database: Database) -> tuple[Tenancy, str]:
    """acme with 16 GPUs approved, a 4-GPU cluster ``train`` and the first node dedicated to
    it; the node's name."""
    with database.transaction() as db:
        t = build_tenancy(db)
        approve_quota(db, t, 16)
        create_cluster(db, t, "train", 4)
        node = db.scalars(select(Node).order_by(Node.id)).first()
        assert node is not None
        factories.assignment(db, node, t.acme)
        return t, node.name


def test_a_pass_stores_queue_quota_and_dedicated_node_samples(
    database: Database, clock: LedgerClock
) -> None:
    _t, node_name = acme_with_a_dedicated_node(database)
    host = InMemoryKube()
    for obj in (queue("acme", "train", "3", "5"), quota("acme", "train", "2", "4"),
                queue("acme", "gone", "1", "1"),  # no such cluster in the portal: skipped
                pod("a", node_name, 2), pod("b", node_name, 4, phase="Pending"),
                pod("c", "some-other-node", 1)):
        host.seed(obj)
    assert run_due(sampler(database, host), "worker-1") == 2  # the host, and the retention
    with database.session() as db:
        taken = {s.source: (s.used_gpus, s.allocated_gpus, s.requested_gpus)
                 for s in db.scalars(select(UsageSample))}
    assert taken == {"queue": (3.0, 3.0, 5.0), "quota": (2.0, 4.0, 2.0), "node": (2.0, 8.0, 2.0)}


def test_the_next_pass_waits_for_the_resync(database: Database, clock: LedgerClock) -> None:
    """The schedule runs on the ledger's clock, which the samples are stamped with."""
    sampler = UsageSampler(cluster_settings(worker_resync_seconds=60), database,
                           InMemoryConnector(InMemoryKube()))
    host_lists = sampler.kube.host()
    assert isinstance(host_lists, InMemoryKube)
    run_due(sampler, "w")
    clock.at(seconds=59)
    assert run_due(sampler, "w") == 0
    assert [c.kind for c in host_lists.calls if c.method == "list"] == [
        "Queue", "ResourceQuota", "Pod", "Event"]  # no node is dedicated: KAI's pending pods
    clock.at(seconds=60)
    run_due(sampler, "w")
    assert len([c for c in host_lists.calls if c.method == "list"]) == 8


def _used_hours(db: Session, admin: Any, days: int = 3) -> float:
    return sum(r.used_gpu_hours for r in report(db, admin, days=days).rows)


def _acme_training(database: Database) -> Any:
    """acme with 8 GPUs approved and a 4-GPU cluster ``train``; the platform admin."""
    with database.transaction() as db:
        t = build_tenancy(db)
        approve_quota(db, t, 8)
        create_cluster(db, t, "train", 4)
        return t.principal(t.platform_admin)


def test_used_gpu_hours_are_hourly_means_and_survive_folding(
    database: Database, clock: LedgerClock
) -> None:
    admin = _acme_training(database)
    host = InMemoryKube()
    # 10:00-11:00 at 2 GPUs then 4 GPUs bound by KAI (mean 3); 11:00-12:00 at 1 GPU, sampled
    # every half hour (a resync of 15 minutes: each sample stands 30 at most). The pods ask
    # for all 4 throughout: what waits is not in use.
    for minute, used in ((0, "2"), (30, "4"), (60, "1"), (90, "1")):
        host.seed(quota("acme", "train", "4", "4"))
        host.seed(queue("acme", "train", used, "4"))
        clock.at(hours=10, minutes=minute)
        run_due(sampler(database, host, resync=900), "w")
    clock.at(hours=12)
    with database.session() as db:
        assert _used_hours(db, admin) == 3.0 + 1.0
    clock.at(days=2, hours=13)  # past the raw retention: the two hours are folded
    run_due(sampler(database, InMemoryKube()), "w")
    with database.session() as db:
        assert db.scalar(select(func.count()).select_from(UsageSample)) == 0
        folded = db.scalars(select(HourlyUsage).order_by(HourlyUsage.hour_s)).all()
        bound = [(h.samples, h.mean_used_gpus, h.peak_used_gpus) for h in folded
                 if h.source == "queue"]
        assert bound == [(2, 3.0, 4.0), (2, 1.0, 1.0)]
        assert _used_hours(db, admin) == 3.0 + 1.0
    clock.at(days=401)
    run_due(sampler(database, InMemoryKube()), "w")
    with database.session() as db:
        assert db.scalar(select(func.count()).select_from(HourlyUsage)) == 0


def test_an_hour_still_running_counts_up_to_now(database: Database, clock: LedgerClock) -> None:
    admin = _acme_training(database)
    host = InMemoryKube()
    host.seed(queue("acme", "train", "4", "4"))
    clock.at(hours=10)
    run_due(sampler(database, host, resync=900), "w")
    clock.at(hours=10, minutes=15)
    with database.session() as db:
        assert _used_hours(db, admin) == 1.0


def test_gpu_hours_in_use_start_when_the_pods_are_bound_to_the_minute(
        database: Database, clock: LedgerClock) -> None:
    """A cluster whose pods KAI binds at 10:55 has been in use for ten minutes at 11:05, not
    since 10:00 (an hour's mean stretched over the whole hour)."""
    admin = _acme_training(database)
    host = InMemoryKube()
    host.seed(queue("acme", "train", "4", "4"))
    for minute in range(55, 66):  # a pass a minute, 10:55 to 11:05
        clock.at(hours=10, minutes=minute)
        run_due(sampler(database, host, resync=60), "w")
    with database.session() as db:
        assert _used_hours(db, admin) == pytest.approx(4 * 10 / 60, abs=1e-6)


@pytest.mark.parametrize(("spec", "gpus"), [
    ({"containers": [{"resources": {"requests": {"nvidia.com/gpu": "2"}}},
                     {"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}, 3),
    ({"containers": [{"resources": {}}],
      "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}]}, 4),
    ({"containers": [{}]}, 0),
])
def test_a_pods_gpus_are_its_containers_or_its_largest_init_container(
    spec: dict[str, Any], gpus: int
) -> None:
    assert pod_gpu_ask({"spec": spec}) == GpuAsk("gpu", "", Decimal(gpus))
