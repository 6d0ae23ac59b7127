"""The usage sampler weighs its samples by the GPUs' utilisation from the operator's Prometheus
(here the fake one): one query per host pass, each queue's and dedicated node's GPUs summed,
capped at those bound; with Prometheus down, silent or unset the samples are taken as before
with the figure unknown (NULL), and the report says unknown."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select

from app.database.core import Database
from app.kube.manifests.names import host_namespace_name
from app.kube.memory import InMemoryKube
from app.reconcilers.usage import UsageSampler
from app.usage.models import UsageSample
from app.utilisation.service import UTILISATION
from tests.clusters.support import cluster_settings
from tests.support.drive import run_due
from tests.support.fake_prometheus import Answers, fake_prometheus, refusing_url, silent_prometheus
from tests.support.kube import InMemoryConnector
from tests.usage.support import LedgerClock, fix_clock, report
from tests.usage.test_sampler import acme_with_a_dedicated_node, pod, queue

TRAIN_NS = host_namespace_name("acme", "train")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


def _gpu(uuid: str, node: str, percent: float, **labels: str) -> tuple[dict[str, str], float]:
    return {"gpu": uuid[-1], "UUID": uuid, "Hostname": node, **labels}, percent


def _fleet(node: str) -> Answers:
    """train's 3 bound GPUs on a pool node (one seen twice, one under exported_namespace),
    the dedicated node's 4 GPUs (2 bound), and a GPU no tenant holds."""
    return Answers(instant={UTILISATION: [
        _gpu("GPU-1", "pool-1", 90.0, namespace=TRAIN_NS, pod="w-0"),
        _gpu("GPU-1", "pool-1", 90.0, namespace=TRAIN_NS, pod="w-0", instance="second"),
        _gpu("GPU-2", "pool-1", 30.0, namespace="gpu-operator", exported_namespace=TRAIN_NS),
        _gpu("GPU-3", "pool-1", 0.0, namespace=TRAIN_NS, pod="w-2"),
        _gpu("GPU-4", node, 100.0, namespace="default", pod="a"),
        _gpu("GPU-5", node, 50.0, namespace="default", pod="a"),
        _gpu("GPU-6", node, 0.0), _gpu("GPU-7", node, 0.0),
        _gpu("GPU-8", "pool-2", 77.0)]})


def _host(node: str) -> InMemoryKube:
    host = InMemoryKube()
    for obj in (queue("acme", "train", "3", "4"), pod("a", node, 2)):
        host.seed(obj)
    return host


def _sampler(database: Database, host: InMemoryKube, url: str | None,
             timeout: float = 3.0) -> UsageSampler:
    settings = cluster_settings(worker_resync_seconds=60, prometheus_url=url,
                                prometheus_timeout_seconds=timeout)
    return UsageSampler(settings, database, InMemoryConnector(host))


def _utilised(database: Database) -> dict[str, tuple[float, float | None]]:
    with database.session() as db:
        return {s.source: (s.used_gpus, s.utilised_gpus) for s in db.scalars(select(UsageSample))}


def test_a_pass_records_how_many_of_each_subjects_gpus_computed(
    database: Database, clock: LedgerClock
) -> None:
    _t, node = acme_with_a_dedicated_node(database)
    answers = _fleet(node)
    with fake_prometheus(answers) as url:
        assert run_due(_sampler(database, _host(node), url), "w") == 2
    # train: 0.9 + 0.3 + 0 of its 3 bound; the node: 1.0 + 0.5 of its 2 bound
    taken = _utilised(database)
    assert taken.keys() == {"queue", "node"}
    assert taken["queue"] == pytest.approx((3.0, 1.2))
    assert taken["node"] == pytest.approx((2.0, 1.5))
    assert answers.asked == [UTILISATION]  # once for the host's pass


def test_utilisation_is_capped_at_the_gpus_bound(database: Database,
                                                 clock: LedgerClock) -> None:
    """KAI says 1 GPU is bound to train; Prometheus still shows 3 of its pods' GPUs (a series
    not gone yet): at most the 1."""
    _t, node = acme_with_a_dedicated_node(database)
    host = InMemoryKube()
    host.seed(queue("acme", "train", "1", "1"))
    with fake_prometheus(_fleet(node)) as url:
        run_due(_sampler(database, host, url), "w")
    assert _utilised(database)["queue"] == (1.0, 1.0)


def test_fewer_gpus_seen_than_bound_is_unknown_not_idle(database: Database,
                                                        clock: LedgerClock) -> None:
    _t, node = acme_with_a_dedicated_node(database)
    host = InMemoryKube()
    host.seed(queue("acme", "train", "4", "4"))  # 4 bound, Prometheus shows 3
    with fake_prometheus(_fleet(node)) as url:
        run_due(_sampler(database, host, url), "w")
    assert _utilised(database)["queue"] == (4.0, None)


@pytest.mark.parametrize("down", ["refused", "silent", "unset"])
def test_without_prometheus_the_samples_are_taken_with_utilisation_unknown(
    database: Database, clock: LedgerClock, down: str
) -> None:
    t, node = acme_with_a_dedicated_node(database)
    started = time.monotonic()
    if down == "silent":
        with silent_prometheus() as url:
            run_due(_sampler(database, _host(node), url, timeout=0.5), "w")
    else:
        run_due(_sampler(database, _host(node), refusing_url() if down == "refused" else None),
                "w")
    assert time.monotonic() - started < 5  # bounded by the timeout
    assert _utilised(database) == {"queue": (3.0, None), "node": (2.0, None)}
    clock.at(minutes=1)
    with database.session() as db:
        rows = report(db, t.principal(t.platform_admin)).rows
    assert [(r.utilised_gpu_hours, r.utilisation_coverage) for r in rows] == [(None, 0.0)]
    assert rows[0].used_gpu_hours == pytest.approx(5 / 60, abs=1e-6)  # 5 GPUs for a minute
