"""Sleep schedules: the syntax, windows crossing midnight, wall-clock hours across DST."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.clusters.sleep_schedule import asleep_at, parse, window_began, zone

NIGHTS_AND_WEEKENDS = "weekdays 20:00-08:00, weekends"


def utc(year: int, month: int, day: int, hour: int, minute: int) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


@pytest.mark.parametrize(("moment", "asleep"), [
    (utc(2026, 12, 7, 7, 59), True),    # Monday before 08:00: the weekend's night goes on
    (utc(2026, 12, 7, 8, 0), False),    # Monday 08:00: awake
    (utc(2026, 12, 7, 19, 59), False),
    (utc(2026, 12, 7, 20, 0), True),    # Monday 20:00
    (utc(2026, 12, 8, 3, 0), True),     # into Tuesday's small hours
    (utc(2026, 12, 11, 23, 0), True),   # Friday night
    (utc(2026, 12, 12, 12, 0), True),   # Saturday noon
    (utc(2026, 12, 13, 23, 59), True),  # Sunday night
])
def test_nights_and_weekends(moment: datetime, asleep: bool) -> None:
    assert asleep_at(NIGHTS_AND_WEEKENDS, "UTC", moment) is asleep


def test_a_window_crossing_midnight_covers_the_hours_of_each_listed_day() -> None:
    schedule = "mon-fri 19:00-07:30"
    assert asleep_at(schedule, "UTC", utc(2026, 12, 7, 7, 29))       # Monday morning
    assert not asleep_at(schedule, "UTC", utc(2026, 12, 7, 7, 30))
    assert asleep_at(schedule, "UTC", utc(2026, 12, 11, 23, 0))      # Friday evening
    assert not asleep_at(schedule, "UTC", utc(2026, 12, 12, 3, 0))   # Saturday: not listed
    assert not asleep_at(schedule, "UTC", utc(2026, 12, 13, 20, 0))  # Sunday


def test_daily_whole_days_and_lists() -> None:
    assert asleep_at("daily 00:00-06:00", "UTC", utc(2026, 12, 9, 5, 59))
    assert not asleep_at("daily 00:00-06:00", "UTC", utc(2026, 12, 9, 6, 0))
    assert asleep_at("sat,sun", "UTC", utc(2026, 12, 12, 0, 0))
    assert not asleep_at("sat,sun", "UTC", utc(2026, 12, 11, 23, 59))
    assert asleep_at("fri-mon", "UTC", utc(2026, 12, 7, 12, 0))      # a range wrapping the week
    assert not asleep_at("fri-mon", "UTC", utc(2026, 12, 8, 12, 0))
    assert asleep_at("mon 09:00-10:00 16:00-24:00; tue", "UTC", utc(2026, 12, 7, 23, 59))
    assert not asleep_at("mon 09:00-10:00 16:00-24:00; tue", "UTC", utc(2026, 12, 7, 12, 0))


def test_hours_are_the_time_zones_wall_clock() -> None:
    # 08:00 in Berlin is 07:00 UTC in winter, 06:00 UTC in summer.
    assert asleep_at(NIGHTS_AND_WEEKENDS, "Europe/Berlin", utc(2026, 12, 7, 6, 30))
    assert not asleep_at(NIGHTS_AND_WEEKENDS, "Europe/Berlin", utc(2026, 12, 7, 7, 0))
    assert not asleep_at(NIGHTS_AND_WEEKENDS, "Europe/Berlin", utc(2026, 6, 8, 6, 30))
    assert asleep_at(NIGHTS_AND_WEEKENDS, "Europe/Berlin", utc(2026, 6, 8, 5, 59))
    # A weekday in New York while it is Saturday in UTC.
    assert not asleep_at("weekends", "America/New_York", utc(2026, 12, 12, 3, 0))


def test_the_spring_change_skips_an_hour_and_the_autumn_change_repeats_one() -> None:
    # Berlin, 29 March 2026: at 01:00 UTC the clocks go from 02:00 to 03:00.
    schedule = "daily 00:00-02:30"
    assert asleep_at(schedule, "Europe/Berlin", utc(2026, 3, 29, 0, 59))     # 01:59 CET
    assert not asleep_at(schedule, "Europe/Berlin", utc(2026, 3, 29, 1, 0))  # 03:00 CEST
    # 25 October 2026: at 01:00 UTC the clocks go from 03:00 back to 02:00.
    night = "daily 02:00-02:30"
    assert asleep_at(night, "Europe/Berlin", utc(2026, 10, 25, 0, 15))      # 02:15 CEST
    assert not asleep_at(night, "Europe/Berlin", utc(2026, 10, 25, 0, 45))  # 02:45 CEST
    assert asleep_at(night, "Europe/Berlin", utc(2026, 10, 25, 1, 15))      # 02:15 CET, again


def test_when_the_current_window_began() -> None:
    # Sunday noon: asleep since Friday 20:00 Berlin time.
    began = window_began(NIGHTS_AND_WEEKENDS, "Europe/Berlin", utc(2026, 12, 6, 11, 0))
    assert began == utc(2026, 12, 4, 19, 0)
    assert window_began(NIGHTS_AND_WEEKENDS, "UTC", utc(2026, 12, 8, 9, 0)) is None
    assert window_began("mon-fri 19:00-07:30", "UTC", utc(2026, 12, 8, 3, 0)) == utc(
        2026, 12, 7, 19, 0)
    # Asleep all week: a week ago at the latest.
    assert window_began("daily", "UTC", utc(2026, 12, 8, 3, 0)) == utc(2026, 12, 1, 3, 0)
    # The window began at a time the spring change skipped: the first instant after the gap.
    assert window_began("sun 02:30-05:00", "Europe/Berlin", utc(2026, 3, 29, 2, 0)) == utc(
        2026, 3, 29, 1, 0)


@pytest.mark.parametrize(("text", "message"), [
    ("", "the schedule is empty"),
    ("nights", "'nights' is neither days"),
    ("20:00-08:00", "'20:00-08:00' needs days before it"),
    ("daily 25:00-01:00", "is not a window of HH:MM times"),
    ("daily 10:60-11:00", "is not a window of HH:MM times"),
    ("daily 10:00-10:00", "is empty"),
    ("daily 24:00-06:00", "starts at 24:00"),
    ("mon-fryday 10:00-11:00", "'mon-fryday' is neither days"),
    ("x" * 201, "at most 200 characters"),
])
def test_bad_schedules_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(text)


@pytest.mark.parametrize("name", ["Mars/Olympus", "", "../etc/passwd", "/UTC", "utc "])
def test_unknown_time_zones_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not an IANA time zone"):
        zone(name)


def test_known_time_zones() -> None:
    assert str(zone("Europe/Berlin")) == "Europe/Berlin"
    assert str(zone("UTC")) == "UTC"
