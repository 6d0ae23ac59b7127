"""The Prometheus client: the query API's answers read, and every way Prometheus cannot say
(not configured, a refused port, a server that never answers, a refusal) an ``Unavailable``
within the bound, never an empty answer that would read as zero."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from app.telemetry.prometheus import Prometheus, Unavailable
from tests.support.fake_prometheus import Answers, fake_prometheus, refusing_url, silent_prometheus

GPU = {"gpu": "0", "UUID": "GPU-1", "Hostname": "node-a", "modelName": "NVIDIA H100"}


def test_an_instant_query_reads_each_series_and_its_value() -> None:
    answers = Answers(instant={"DCGM_FI_DEV_GPU_UTIL": [(GPU, 42.0)]})
    with fake_prometheus(answers) as url:
        [sample] = Prometheus(url + "/", 3).instant("DCGM_FI_DEV_GPU_UTIL",
                                                     datetime.now(UTC))
    assert (dict(sample.labels), sample.value) == (GPU, 42.0)


def test_a_range_query_reads_every_step() -> None:
    end = datetime(2026, 12, 6, 12, tzinfo=UTC)
    with fake_prometheus(Answers(range_values=[(GPU, 7.5)])) as url:
        [series] = Prometheus(url, 3).range("DCGM_FI_DEV_GPU_UTIL", end - timedelta(hours=1),
                                            end, 900)
    assert [value for _, value in series.points] == [7.5] * 5
    assert series.points[-1][0] == end.timestamp()


def test_without_an_address_nothing_is_asked_and_it_says_why() -> None:
    with pytest.raises(Unavailable, match="PORTAL_PROMETHEUS_URL is not set"):
        Prometheus(None, 3).instant("up")


def test_a_refused_port_is_unavailable_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(Unavailable, match="unreachable"):
        Prometheus(refusing_url(), 30).instant("up")
    assert time.monotonic() - started < 5  # far below the bound: nothing waited on


# httpx's own default would wait 5 s: a reading given up on sooner is the bound's doing.
def test_a_server_that_never_answers_is_given_up_on_at_the_bound() -> None:
    with silent_prometheus() as url:
        started = time.monotonic()
        with pytest.raises(Unavailable, match="in time"):
            Prometheus(url, 0.5).instant("up")
        assert 0.4 < time.monotonic() - started < 4


def test_queries_of_one_reading_share_one_deadline() -> None:
    """A reading of several queries is bounded as a whole: once its time is up, the next query
    is not even sent."""
    with silent_prometheus() as url:
        prometheus = Prometheus(url, 0.5)
        with pytest.raises(Unavailable):
            prometheus.instant("up")
        started = time.monotonic()
        for _ in range(2):
            with pytest.raises(Unavailable, match="in time"):
                prometheus.instant("up")
        assert time.monotonic() - started < 0.5
