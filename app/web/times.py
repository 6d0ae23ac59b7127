"""Moments shown as "5 min ago", with the exact time (UTC) on hover and for machines."""

from __future__ import annotations

from datetime import UTC, datetime

from markupsafe import Markup, escape

_UNITS = ((86400 * 365, "year"), (86400 * 30, "month"), (86400 * 7, "week"), (86400, "day"),
          (3600, "hour"), (60, "min"))


def parse(moment: datetime | str) -> datetime | None:
    """A datetime (naive ones are UTC, as the database stores them) or an RFC 3339 string."""
    if isinstance(moment, str):
        try:
            moment = datetime.fromisoformat(moment.replace("Z", "+00:00"))
        except ValueError:
            return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def ago(moment: datetime, now: datetime) -> str:
    seconds = int((now - moment).total_seconds())
    future, seconds = seconds < 0, abs(seconds)
    if seconds < 60:
        return "just now"
    for size, unit in _UNITS:
        if seconds >= size:
            count = seconds // size
            label = unit if unit == "min" or count == 1 else unit + "s"
            return f"in {count} {label}" if future else f"{count} {label} ago"
    return "just now"  # unreachable: a minute is the smallest unit


def exact(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def time_tag(moment: datetime | str | None, now: datetime | None = None) -> Markup:
    """``<time>`` with the relative text; the exact time in ``title`` and ``datetime``."""
    if moment is None or moment == "":
        return Markup("&ndash;")
    parsed = parse(moment)
    if parsed is None:
        return escape(str(moment))
    # "2026-12-03T15:24:12": one isoformat() rather than two strftime() calls.
    iso = parsed.astimezone(UTC).replace(tzinfo=None, microsecond=0).isoformat()
    text = ago(parsed, now or datetime.now(UTC))
    # Digits, separators and unit words only: nothing to escape, so no Markup.format (half
    # of this function's time, on every row of a long page).
    return Markup(  # noqa: S704 - a formatted datetime and ago()'s words need no escaping
        f'<time datetime="{iso}Z" title="{iso.replace("T", " ")} UTC">{text}</time>')
