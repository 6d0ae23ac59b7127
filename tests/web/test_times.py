"""Relative times read naturally and keep the exact UTC time for hover and for machines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.web.times import ago, time_tag

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("delta", "text"), [
    (timedelta(seconds=5), "just now"), (timedelta(minutes=1), "1 min ago"),
    (timedelta(minutes=59), "59 min ago"), (timedelta(hours=1), "1 hour ago"),
    (timedelta(hours=5), "5 hours ago"), (timedelta(days=1), "1 day ago"),
    (timedelta(days=9), "1 week ago"), (timedelta(days=400), "1 year ago"),
    (-timedelta(days=2), "in 2 days"),
])
def test_ago(delta: timedelta, text: str) -> None:
    assert ago(NOW - delta, NOW) == text


def test_the_tag_carries_the_exact_time() -> None:
    naive = datetime(2026, 11, 30, 11, 0)  # as SQLite returns it: UTC without a zone
    assert time_tag(naive, NOW) == (
        '<time datetime="2026-11-30T11:00:00Z" title="2026-11-30 11:00:00 UTC">1 hour ago</time>')
    assert time_tag("2026-11-30T11:58:00Z", NOW).startswith('<time datetime="2026-11-30T11:58')


def test_nothing_or_nonsense_is_shown_safely() -> None:
    assert time_tag(None, NOW) == "&ndash;"
    assert time_tag("<b>soon</b>", NOW) == "&lt;b&gt;soon&lt;/b&gt;"
