"""Capacity shown on pages: summed at most a moment ago, summed afresh after a change made
here, and never reused by a decision."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.gpu_classes import capacity_cache
from app.gpu_classes import service as gpu_classes
from app.gpu_classes.schemas import Capacity
from tests import factories
from tests.support.principals import bearer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_figures_are_reused_for_a_moment_then_summed_again(db: Session) -> None:
    host, gpu = factories.host_cluster(db), factories.gpu_class(db)
    factories.node(db, host, gpu, gpu_count=8)
    clock, sums = Clock(), []

    def summed(db: Session, ids: Sequence[int]) -> dict[int, Capacity]:
        sums.append(list(ids))
        return gpu_classes.capacities(db, ids)

    def total() -> int:
        return capacity_cache.recent(db, [gpu.id], summed, clock)[gpu.id].total

    assert total() == 8
    factories.node(db, host, gpu, gpu_count=8)
    clock.now += capacity_cache.MAX_AGE_SECONDS / 2
    assert total() == 8 and len(sums) == 1  # a moment later: the same figures
    clock.now += capacity_cache.MAX_AGE_SECONDS
    assert total() == 16 and len(sums) == 2
    factories.node(db, host, gpu, gpu_count=8)
    capacity_cache.forget(db)  # what a quota, assignment or inventory change does
    assert total() == 24 and len(sums) == 3
    assert gpu_classes.capacity(db, gpu.id).total == 24  # decisions always sum afresh


def test_while_one_request_sums_aged_figures_the_others_show_them(db: Session) -> None:
    host, gpu = factories.host_cluster(db), factories.gpu_class(db)
    factories.node(db, host, gpu, gpu_count=8)
    clock = Clock()
    assert capacity_cache.recent(db, [gpu.id], gpu_classes.capacities, clock)[gpu.id].total == 8
    factories.node(db, host, gpu, gpu_count=8)
    clock.now += capacity_cache.MAX_AGE_SECONDS
    with capacity_cache._summing:  # another request is summing
        shown = capacity_cache.recent(db, [gpu.id], gpu_classes.capacities, clock)
    assert shown[gpu.id].total == 8
    assert capacity_cache.recent(db, [gpu.id], gpu_classes.capacities, clock)[gpu.id].total == 16


def test_an_assignment_or_approval_made_here_shows_at_once(client: TestClient,
                                                          db: Session) -> None:
    host = factories.host_cluster(db, "default")
    host.is_default = True
    gpu, tenant = factories.gpu_class(db), factories.tenant(db, "acme")
    factories.node(db, host, gpu, "n1", gpu_count=8)
    factories.quota(db, tenant, gpu, gpus=8)
    request = factories.quota_request(db, tenant, gpu, gpus=4)
    admin = bearer(db, factories.user(db, admin=True))
    db.commit()

    def shown() -> dict[str, int]:
        [listed] = client.get("/api/v1/gpu-classes", headers=admin).json()["items"]
        return {k: listed["capacity"][k] for k in ("assigned", "guaranteed")}

    assert shown() == {"assigned": 0, "guaranteed": 8}
    assert client.put("/api/v1/nodes/n1/assignment", headers=admin,
                      json={"tenant": "acme"}).status_code == 200
    assert shown() == {"assigned": 8, "guaranteed": 8}
    assert client.post(f"/api/v1/quota-requests/{request.id}/approve", headers=admin,
                       json={"overcommit": True}).status_code == 200
    assert shown() == {"assigned": 8, "guaranteed": 12}
