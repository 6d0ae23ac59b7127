"""Use samples from several host clusters, on in-memory hosts: each host is read with its own
client, its queues, quotas and dedicated nodes count only for the clusters and nodes placed on
that host, and a host that cannot be read is skipped without stopping the others."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import select

from app.database.core import Database
from app.kube.errors import KubeError
from app.kube.memory import InMemoryKube
from app.usage.models import UsageSample
from app.usage.sampler import UsageSampler
from tests import factories
from tests.clusters.support import cluster_settings
from tests.support.kube import PerHostConnector
from tests.usage.support import LedgerClock, fix_clock
from tests.usage.test_sampler import pod, queue, quota


class Unreachable(InMemoryKube):
    def list(self, *args: object, **kwargs: object) -> list[dict[str, object]]:
        raise KubeError("connection refused", reason="Unreachable")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


def _sampler(database: Database, connector: PerHostConnector) -> UsageSampler:
    return UsageSampler(cluster_settings(worker_resync_seconds=0), database, connector,
                        clock=lambda: 0.0)


def _taken(database: Database) -> set[tuple[str, int, float]]:
    with database.session() as db:
        return {(s.source, s.subject_id, s.used_gpus) for s in db.scalars(select(UsageSample))}


def _two_hosts(database: Database) -> dict[str, int]:
    """acme: cluster train on the environment's host, eval on gpu-us-1; a node named gpu-1
    on each host, both dedicated to acme."""
    with database.transaction() as db:
        eu, us = factories.env_host(db), factories.registered_host(db, "gpu-us-1", "us")
        factories.registered_host(db, "broken")
        acme, h100 = factories.tenant(db, "acme"), factories.gpu_class(db)
        train = factories.cluster(db, acme, eu, "train", gpu_class_id=h100.id, gpus=4)
        evaluation = factories.cluster(db, acme, us, "eval", gpu_class_id=h100.id, gpus=2)
        eu_node = factories.node(db, eu, h100, name="gpu-1", gpu_count=8)
        us_node = factories.node(db, us, h100, name="gpu-1", gpu_count=4)
        for node in (eu_node, us_node):
            factories.assignment(db, node, acme)
        return {"train": train.id, "eval": evaluation.id, "eu-node": eu_node.id,
                "us-node": us_node.id}


def test_each_host_counts_for_its_own_clusters_and_nodes(
    database: Database, clock: LedgerClock
) -> None:
    ids = _two_hosts(database)
    eu, us = InMemoryKube(), InMemoryKube()
    for obj in (queue("acme", "train", "3", "3"), quota("acme", "train", "3", "4"),
                pod("a", "gpu-1", 3)):
        eu.seed(obj)
    for obj in (queue("acme", "eval", "1", "2"), quota("acme", "eval", "1", "2"),
                queue("acme", "train", "7", "7"),  # train is not on this host: not counted
                pod("b", "gpu-1", 1)):
        us.seed(obj)
    connector = PerHostConnector({"default": eu, "gpu-us-1": us}, broken=("broken",))
    assert _sampler(database, connector).run_due("worker-1") == 6
    assert _taken(database) == {
        ("queue", ids["train"], 3.0), ("quota", ids["train"], 3.0),
        ("node", ids["eu-node"], 3.0),
        ("queue", ids["eval"], 1.0), ("quota", ids["eval"], 1.0),
        ("node", ids["us-node"], 1.0)}
    assert sorted(connector.asked) == ["broken", "default", "gpu-us-1"]


def test_a_host_that_cannot_be_read_is_skipped_and_keeps_its_samples(
    database: Database, clock: LedgerClock, caplog: pytest.LogCaptureFixture
) -> None:
    ids = _two_hosts(database)
    eu, us = InMemoryKube(), InMemoryKube()
    eu.seed(quota("acme", "train", "2", "4"))
    us.seed(quota("acme", "eval", "1", "2"))
    connector = PerHostConnector({"default": eu, "gpu-us-1": us}, broken=("broken",))
    _sampler(database, connector).run_due("worker-1")
    connector.ports["gpu-us-1"] = Unreachable()
    clock.at(minutes=5)
    with caplog.at_level(logging.WARNING):
        taken = _sampler(database, connector).run_due("worker-1")
    assert taken == 2  # the environment's host: its quota and its dedicated node
    with database.session() as db:
        eval_samples = db.scalars(select(UsageSample).where(
            UsageSample.subject_id == ids["eval"], UsageSample.source == "quota")).all()
        train_samples = db.scalars(select(UsageSample).where(
            UsageSample.subject_id == ids["train"], UsageSample.source == "quota")).all()
    assert len(train_samples) == 2 and len(eval_samples) == 1  # gpu-us-1's first one stays
    assert "reading GPU use from host cluster gpu-us-1 failed" in caplog.text
    assert "reading GPU use from host cluster broken failed (ValueError)" in caplog.text


def test_a_failing_host_is_tried_again_after_a_backoff_that_doubles(
    database: Database, clock: LedgerClock
) -> None:
    """An unreachable host costs the others a client timeout per try, not on every pass."""
    _two_hosts(database)
    connector = PerHostConnector({"default": InMemoryKube(), "gpu-us-1": InMemoryKube()},
                                 broken=("broken",))
    now = [0.0]
    sampler = UsageSampler(cluster_settings(worker_resync_seconds=10), database, connector,
                           clock=lambda: now[0])

    def asked_at(seconds: float) -> list[str]:
        now[0] = seconds
        connector.asked.clear()
        sampler.run_due("worker-1")
        return sorted(connector.asked)

    assert asked_at(0) == ["broken", "default", "gpu-us-1"]
    assert asked_at(10) == ["default", "gpu-us-1"]  # broken waits 20 s, then 40 s, 80 s ...
    assert asked_at(20) == ["broken", "default", "gpu-us-1"]
    assert asked_at(30) == ["default", "gpu-us-1"]
    assert asked_at(50) == ["default", "gpu-us-1"]
    assert asked_at(60) == ["broken", "default", "gpu-us-1"]
    # Its credentials were fixed: read at its next try, then on every pass again.
    connector.broken = ()
    connector.ports["broken"] = InMemoryKube()
    assert asked_at(130) == ["default", "gpu-us-1"]
    assert asked_at(140) == ["broken", "default", "gpu-us-1"]
    assert asked_at(150) == ["broken", "default", "gpu-us-1"]
