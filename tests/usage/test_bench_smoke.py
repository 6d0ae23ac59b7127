"""The usage report benchmark's code on a tiny history, so that it cannot rot."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from bench import usage_report
from tests.support import postgres


@pytest.fixture
def bench_url() -> Iterator[str]:
    name = postgres.unique_name("gtp_bench_usage")
    yield postgres.sqlalchemy_url(name)
    postgres.drop_database(name)


def test_the_benchmark_runs_on_a_tiny_history(bench_url: str) -> None:
    usage_report.recreate(bench_url)
    usage_report.seed(bench_url, tenants=1, clusters=1, now_s=int(time.time()))
    figures = usage_report.measure(bench_url, repeat=1)
    assert set(figures) == {"list"} | {f"{tenant} {span}" for tenant in ("busy-0", "quiet")
                                       for span in ("30 days by day", "400 days by day",
                                                    "400 days by month")}
    assert all(ms > 0 for ms in figures.values())
