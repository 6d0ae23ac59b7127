"""Use samples from several host clusters, on in-memory hosts: each host is read with its own
client, its queues, quotas and dedicated nodes count only for the clusters and nodes placed on
that host, and a host that cannot be read is skipped without stopping the others; one that
does not answer is retried after its breaker's growing backoff, the others at their resync."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select

from app.database.core import Database
from app.hosts import repository as hosts_repository
from app.kube.errors import KubeError, TransientKubeError
from app.kube.memory import InMemoryKube
from app.reconcilers.usage import UsageSampler
from app.usage.models import UsageSample
from app.workqueue import USAGE
from app.workqueue.repository import items
from tests import factories
from tests.clusters.support import cluster_settings
from tests.support.drive import run_due
from tests.support.kube import PerHostConnector
from tests.usage.support import T0, LedgerClock, fix_clock
from tests.usage.test_sampler import pod, queue, quota


class Unreachable(InMemoryKube):
    def list(self, *args: object, **kwargs: object) -> list[dict[str, object]]:
        raise KubeError("connection refused", reason="Unreachable")


class Refused(InMemoryKube):
    """Nothing answers at the host's address."""

    def list(self, *args: object, **kwargs: object) -> list[dict[str, object]]:
        raise TransientKubeError("connection refused", reason="ConnectionError")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


def _sampler(database: Database, connector: PerHostConnector) -> UsageSampler:
    return UsageSampler(cluster_settings(worker_resync_seconds=300), database, connector)


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
    run_due(_sampler(database, connector), "worker-1")
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
    run_due(_sampler(database, connector), "worker-1")
    connector.ports["gpu-us-1"] = Unreachable()
    clock.at(minutes=5)
    with caplog.at_level(logging.WARNING):
        run_due(_sampler(database, connector), "worker-1")
    with database.session() as db:
        now_s = int(clock.now.timestamp())
        taken = db.scalars(select(UsageSample).where(UsageSample.taken_s == now_s)).all()
        # the environment's host: its quota and its dedicated node
        assert sorted(s.source for s in taken) == ["node", "quota"]
        eval_samples = db.scalars(select(UsageSample).where(
            UsageSample.subject_id == ids["eval"], UsageSample.source == "quota")).all()
        train_samples = db.scalars(select(UsageSample).where(
            UsageSample.subject_id == ids["train"], UsageSample.source == "quota")).all()
    assert len(train_samples) == 2 and len(eval_samples) == 1  # gpu-us-1's first one stays
    assert "reading GPU use from host cluster gpu-us-1 failed" in caplog.text
    assert "reading GPU use from host cluster broken failed (ValueError)" in caplog.text


def test_a_host_that_does_not_answer_is_tried_again_after_a_backoff_that_grows(
    database: Database, clock: LedgerClock
) -> None:
    """An unreachable host costs the others a client timeout per try, not on every pass: its
    breaker opens for 1-2 s, then 2-4 s, 4-8 s ... (jittered); the others wait for their
    resync, and so do credentials the client cannot use. (The ledger's clock, which the
    schedule runs on, counts whole seconds.)"""
    _two_hosts(database)
    connector = PerHostConnector({"default": InMemoryKube(), "gpu-us-1": Refused()},
                                 broken=("broken",))
    sampler = _sampler(database, connector)

    def asked_at(moment: datetime) -> list[str]:
        clock.now = moment.replace(microsecond=0) + timedelta(seconds=1)  # a whole second on
        connector.asked.clear()
        run_due(sampler, "worker-1")
        return sorted(connector.asked)

    def due_in() -> dict[str, float]:
        with database.session() as db:
            names = {str(h.id): h.name for h in hosts_repository.all_hosts(db)}
            return {names.get(item.key, item.key): (item.due_at - clock.now).total_seconds()
                    for item in items(db, USAGE)}

    assert asked_at(clock.now - timedelta(seconds=1)) == ["broken", "default", "gpu-us-1"]
    waits = due_in()
    assert 1 <= waits["gpu-us-1"] <= 2
    assert waits["broken"] == waits["default"] == waits["retention"] == 300
    for low, high in ((2, 4), (4, 8)):
        assert asked_at(clock.now + timedelta(seconds=waits["gpu-us-1"])) == ["gpu-us-1"]
        waits = due_in()
        assert low <= waits["gpu-us-1"] <= high
    # It answers again, and its credentials were fixed: each is read at its next try, then at
    # every resync.
    connector.ports["gpu-us-1"] = InMemoryKube()
    connector.broken = ()
    connector.ports["broken"] = InMemoryKube()
    assert asked_at(clock.now + timedelta(seconds=waits["gpu-us-1"])) == ["gpu-us-1"]
    assert due_in()["gpu-us-1"] == 300
    assert asked_at(T0 + timedelta(seconds=299)) == ["broken", "default"]
