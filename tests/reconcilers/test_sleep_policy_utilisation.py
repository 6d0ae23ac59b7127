"""The sleep-policy kind with idle measured by GPU utilisation, against a fake Prometheus: a
cluster whose GPUs all stayed below the threshold sleeps, one busy or not known to be idle
(a GPU bound within the window, too few series, Prometheus down) stays awake, and a cluster
measured by bound GPUs sleeps as before whatever Prometheus does."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

from app.database.core import Database
from app.kube.manifests.names import host_namespace_name
from app.reconcilers import sleep_policy as sleep_policy_kind
from app.utilisation.windows import cluster_peaks as real_peaks
from app.utilisation.windows import window_query
from tests.reconcilers.test_sleep_policy import (
    MONDAY_NOON,
    Clock,
    cluster,
    events,
    kind,
    make_cluster,
    sample,
)
from tests.support.drive import run_due
from tests.support.fake_prometheus import (
    Answers,
    fake_prometheus,
    refusing_url,
    silent_prometheus,
)

TRAIN_NS = host_namespace_name("acme", "train")
WINDOW = window_query(30 * 60)  # the idle minutes, 30, are more than two scrapes


def gpu(uuid: str, namespace: str = TRAIN_NS) -> dict[str, str]:
    """A GPU of the exporter scraped without honor_labels: the pod's namespace exported."""
    return {"gpu": uuid[-1], "UUID": uuid, "Hostname": "pool-1", "namespace": "gpu-operator",
            "exported_namespace": namespace, "exported_pod": f"worker-{uuid[-1]}"}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def answers() -> Answers:
    return Answers()


@pytest.fixture
def prometheus(answers: Answers) -> Iterator[str]:
    with fake_prometheus(answers) as url:
        yield url


def bound_all_window(database: Database, cluster_id: int, gpus: float = 2) -> None:
    """Samples of the cluster with ``gpus`` bound, before its idle minutes and now."""
    for minutes in (-40, -20, -5):
        sample(database, cluster_id, MONDAY_NOON + timedelta(minutes=minutes), gpus)


def measured(database: Database, name: str = "train", **fields: Any) -> int:
    return make_cluster(database, name, sleep_after_idle_minutes=30,
                        idle_measure="utilisation", **fields)


def test_a_cluster_whose_gpus_stayed_below_the_threshold_sleeps_and_says_so(
        database: Database, clock: Clock, answers: Answers, prometheus: str) -> None:
    train = measured(database)
    bound_all_window(database, train)
    answers.instant[WINDOW] = [(gpu("GPU-1"), 1.0), (gpu("GPU-2"), 3.5),
                               (gpu("GPU-9", host_namespace_name("acme", "other")), 90.0)]
    run_due(kind(database, clock, prometheus_url=prometheus), "w")
    after = cluster(database, train)
    assert (after.power, after.power_reason) == ("asleep", "idle")
    [event] = events(database, "virtual_cluster.sleep")
    assert event.after is not None
    assert {k: event.after[k] for k in ("measure", "peak_percent", "gpus")} == {
        "measure": "utilisation", "peak_percent": 3.5, "gpus": 2}
    assert answers.asked == [WINDOW]  # one query, however many clusters share the window


@pytest.mark.parametrize(("case", "series", "samples"), [
    ("one GPU busy", [("GPU-1", 1.0), ("GPU-2", 40.0)], {}),
    ("at the threshold is busy", [("GPU-1", 5.0), ("GPU-2", 0.0)], {}),
    ("a GPU bound within the window: Prometheus leaves it out of the window's figures",
     [("GPU-1", 0.0)], {-40: 1, -20: 1, -5: 2}),
    ("too few series: an exporter not scraped", [("GPU-1", 0.0)], {}),
    ("no series at all", [], {}),
])
def test_a_cluster_stays_awake_with(database: Database, clock: Clock, answers: Answers,
                                    prometheus: str, case: str, series: list[Any],
                                    samples: dict[int, float]) -> None:
    train = measured(database)
    if samples:
        for minutes, used in samples.items():
            sample(database, train, MONDAY_NOON + timedelta(minutes=minutes), used)
    else:
        bound_all_window(database, train)
    answers.instant[WINDOW] = [(gpu(uuid), value) for uuid, value in series]
    run_due(kind(database, clock, prometheus_url=prometheus), "w")
    assert cluster(database, train).power == "awake", case


@pytest.mark.parametrize("url", [None, "refused", "silent"])
def test_without_a_reading_a_utilisation_cluster_stays_and_a_bound_one_still_sleeps(
        database: Database, clock: Clock, url: str | None) -> None:
    train = measured(database)
    bound_all_window(database, train)
    quiet = measured(database, "quiet")  # no GPU pod bound: idle however it is measured
    sample(database, quiet, MONDAY_NOON - timedelta(minutes=5), 0)
    plain = make_cluster(database, "plain", sleep_after_idle_minutes=30)
    sample(database, plain, MONDAY_NOON - timedelta(minutes=5), 0)
    with silent_prometheus() as silent:
        settings = {"prometheus_url": refusing_url() if url == "refused" else silent,
                    "prometheus_timeout_seconds": 0.5} if url else {}
        began = time.monotonic()
        run_due(kind(database, clock, **settings), "w")
        assert time.monotonic() - began < 5  # a silent Prometheus waited on to its deadline
    assert cluster(database, train).power == "awake"
    assert [cluster(database, c).power for c in (quiet, plain)] == ["asleep", "asleep"]
    for event in events(database, "virtual_cluster.sleep"):
        assert event.after is not None and "measure" not in event.after


def test_prometheus_is_asked_only_for_a_utilisation_cluster_with_gpu_pods_bound(
        database: Database, clock: Clock, answers: Answers, prometheus: str) -> None:
    plain = make_cluster(database, "plain", sleep_after_idle_minutes=30)
    bound_all_window(database, plain)
    quiet = measured(database, "quiet")
    sample(database, quiet, MONDAY_NOON - timedelta(minutes=5), 0)
    run_due(kind(database, clock, prometheus_url=prometheus), "w")
    assert answers.asked == []
    assert (cluster(database, plain).power, cluster(database, quiet).power) == (
        "awake", "asleep")


def test_a_sped_up_window_still_holds_two_scrapes(
        database: Database, clock: Clock, answers: Answers, prometheus: str) -> None:
    train = measured(database)
    sample(database, train, MONDAY_NOON - timedelta(seconds=1), 1)
    reconciler = kind(database, clock, prometheus_url=prometheus, sleep_policy_speedup=720,
                      utilisation_scrape_seconds=15)
    answers.instant[window_query(30)] = [(gpu("GPU-1"), 0.0)]
    run_due(reconciler, "w")
    assert answers.asked == [window_query(30)]  # 30 minutes / 720 = 2.5 s < 2 x 15 s
    assert cluster(database, train).power == "asleep"


def test_prometheus_is_read_with_no_session_or_transaction_open(
        database: Database, clock: Clock, answers: Answers, prometheus: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow Prometheus holds no connection, transaction or row lock (up to its deadline)."""
    train = measured(database)
    bound_all_window(database, train)
    answers.instant[WINDOW] = [(gpu("GPU-1"), 1.0), (gpu("GPU-2"), 1.0)]
    reconciler = kind(database, clock, prometheus_url=prometheus)
    open_now: list[str] = []
    read_while: list[list[str]] = []

    def counted(opened: Callable[[], Any], name: str) -> Callable[[], Any]:
        @contextmanager
        def wrapper() -> Iterator[Any]:
            open_now.append(name)
            try:
                with opened() as db:
                    yield db
            finally:
                open_now.remove(name)
        return wrapper

    monkeypatch.setattr(database, "session", counted(database.session, "session"))
    monkeypatch.setattr(database, "transaction", counted(database.transaction, "transaction"))

    def reading(*args: Any) -> dict[int, list[float]]:
        read_while.append(list(open_now))
        return real_peaks(*args)

    monkeypatch.setattr(sleep_policy_kind, "cluster_peaks", reading)
    run_due(reconciler, "w")
    assert read_while == [[]]
    assert cluster(database, train).power == "asleep"
