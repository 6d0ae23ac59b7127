"""A cluster's sleep schedule: when, in its own time zone, it should be asleep.

A schedule is entries separated by whitespace, commas or semicolons; each entry is days,
optionally followed by one or more windows ``HH:MM-HH:MM``::

    weekdays 20:00-08:00, weekends      asleep from Friday 20:00 to Monday 08:00, every night
    mon-fri 19:00-07:30                 weekday nights (Monday's morning and Friday's evening)
    daily 00:00-06:00
    sat,sun                             whole days

Days: ``daily``, ``weekdays`` (mon-fri), ``weekends`` (sat, sun), a day (``mon`` … ``sun``),
a range (``mon-fri``, ``fri-mon``) or a list of those joined by commas without a space
(``sat,sun``, ``mon,wed-fri``). An entry without a window is those whole days.

A window is the wall-clock hours of each of its days: ``09:00-17:00`` from 09:00 to 17:00; a
window whose end comes before its start crosses midnight and covers that day's hours before
the end and after the start (``20:00-08:00`` on weekdays: Monday 00:00-08:00, …, Friday
20:00-24:00; the night from Friday into Saturday goes on only if Saturday is listed too).
``24:00`` ends a window at midnight. Hours are wall-clock in the cluster's IANA time zone,
so a window keeps its local hours across daylight saving time changes (an hour skipped in
spring is never inside a window that starts in it; an hour repeated in autumn is inside
both times).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_KEYWORDS = {"daily": frozenset(range(7)), "weekdays": frozenset(range(5)),
             "weekends": frozenset({5, 6})}
_WINDOW = re.compile(r"(\d{1,2}):(\d{2})-(\d{1,2}):(\d{2})")
_DAY = 24 * 60
MAX_LENGTH = 200


@dataclass(frozen=True)
class Schedule:
    """For each weekday (0 = Monday), the minute spans [start, end) of the day asleep."""

    spans: tuple[tuple[tuple[int, int], ...], ...]

    def covers(self, weekday: int, minute: int) -> bool:
        return any(start <= minute < end for start, end in self.spans[weekday])


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; ValueError when there is none of that name."""
    if not name or name != name.strip() or ".." in name or name.startswith("/"):
        raise ValueError(f"{name!r} is not an IANA time zone, e.g. Europe/Berlin or UTC")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ValueError(
            f"{name!r} is not an IANA time zone, e.g. Europe/Berlin or UTC") from error


@lru_cache(maxsize=1024)
def parse(text: str) -> Schedule:
    """The schedule ``text`` says; ValueError saying what is wrong and where."""
    if len(text) > MAX_LENGTH:
        raise ValueError(f"a schedule has at most {MAX_LENGTH} characters")
    words = [w for w in re.split(r"[\s;]+|,(?=\s)|,$|(?<=\d),", text.strip().lower()) if w]
    if not words:
        raise ValueError('the schedule is empty; e.g. "weekdays 20:00-08:00, weekends"')
    spans: list[list[tuple[int, int]]] = [[] for _ in range(7)]
    days: frozenset[int] | None = None
    windows: list[tuple[int, int]] = []
    for word in [*words, ""]:
        window = _window(word) if word and _WINDOW.fullmatch(word) else None
        if window is not None:
            if days is None:
                raise ValueError(f"{word!r} needs days before it, e.g. \"daily {word}\"")
            windows.extend(window)
            continue
        if days is not None:
            _add(spans, days, windows or [(0, _DAY)])
        days, windows = (_days(word), []) if word else (None, [])
    return Schedule(tuple(tuple(sorted(day)) for day in spans))


def _add(spans: list[list[tuple[int, int]]], days: frozenset[int],
         windows: list[tuple[int, int]]) -> None:
    for day in days:
        spans[day].extend(windows)


def _window(word: str) -> list[tuple[int, int]]:
    match = _WINDOW.fullmatch(word)
    assert match is not None
    start = _minute(word, int(match[1]), int(match[2]))
    end = _minute(word, int(match[3]), int(match[4]))
    if start == end:
        raise ValueError(f"the window {word!r} is empty: its start and end are the same")
    if start == _DAY:
        raise ValueError(f"the window {word!r} starts at 24:00; start it at 00:00")
    if end > start:
        return [(start, end)]
    return [(0, end), (start, _DAY)] if end else [(start, _DAY)]


def _minute(word: str, hour: int, minute: int) -> int:
    if minute > 59 or hour > 24 or (hour == 24 and minute):
        raise ValueError(f"{word!r} is not a window of HH:MM times from 00:00 to 24:00")
    return hour * 60 + minute


def _days(word: str) -> frozenset[int]:
    if word in _KEYWORDS:
        return _KEYWORDS[word]
    found: set[int] = set()
    for part in word.split(","):
        if part in _KEYWORDS:
            found.update(_KEYWORDS[part])
            continue
        first, _, last = part.partition("-")
        start, end = _day(first, word), _day(last or first, word)
        found.update((start + n) % 7 for n in range((end - start) % 7 + 1))
    return frozenset(found)


def _day(name: str, word: str) -> int:
    if name not in DAY_NAMES:
        raise ValueError(
            f"{word!r} is neither days (daily, weekdays, weekends, mon … sun, mon-fri, "
            f"sat,sun) nor a window HH:MM-HH:MM")
    return DAY_NAMES.index(name)


def asleep_at(schedule: str, tz: str, now: datetime) -> bool:
    """Whether a cluster on ``schedule`` in time zone ``tz`` should be asleep at ``now``
    (an aware datetime)."""
    local = now.astimezone(zone(tz))
    return parse(schedule).covers(local.weekday(), local.hour * 60 + local.minute)


def window_began(schedule: str, tz: str, now: datetime) -> datetime | None:
    """When the stretch of time asleep that ``now`` is in began (at most a week back: an
    earlier start is given as a week ago); None if ``now`` is in none."""
    if not asleep_at(schedule, tz, now):
        return None
    place, parsed = zone(tz), parse(schedule)
    today = now.astimezone(place).date()
    # Every local start of a span in the last week, as instants (around a change of the
    # clocks, every minute between its two readings: a start the spring change skips begins
    # at the first instant after the gap).
    starts = sorted({
        instant for back in range(8)
        for start in {0, *(s for s, _ in parsed.spans[(today.weekday() - back) % 7])}
        for instant in _instants(datetime.combine(
            today - timedelta(days=back), time(start // 60, start % 60), place))})
    for instant in reversed(starts):
        if instant <= now and _begins(schedule, tz, instant):
            return instant
    return now - timedelta(days=7)


def _instants(local: datetime) -> list[datetime]:
    first = local.replace(fold=0).astimezone(UTC)
    second = local.replace(fold=1).astimezone(UTC)
    low, high = sorted((first, second))
    return [low + timedelta(minutes=n) for n in range(int((high - low).total_seconds()) // 60 + 1)]


def _begins(schedule: str, tz: str, instant: datetime) -> bool:
    return asleep_at(schedule, tz, instant) and not asleep_at(
        schedule, tz, instant - timedelta(minutes=1))
