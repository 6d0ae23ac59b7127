"""A cluster's conditions on a time axis: one lane per condition, a segment per status it held,
from each kept transition to the next (or now), patterned by status. The worker keeps the
latest transitions of each cluster, so flips the table (which shows only the current status)
cannot show are drawn; before a condition's first kept transition its lane is empty."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from markupsafe import Markup

from app.web.charts.svg import Scale, Series, bar, defs, frame, legend, text
from app.web.charts.svg import title as chart_title
from app.web.times import parse

WIDTH = 760
LABEL_WIDTH = 150
PLOT_WIDTH = 440  # then a column with each condition's current status and since when
LEGEND_Y = 40
TOP = 56
LANE = 22
MIN_LABEL = 44  # px a segment needs for its status written inside

STATUSES = {
    "True": Series("true", "True", "#1f7a3a", "solid"),
    "False": Series("false", "False", "#a32020", "hatch"),
    "Unknown": Series("unknown", "Unknown", "#9a5b00", "dots"),
}


@dataclass(frozen=True)
class Transition:
    type: str
    status: str
    reason: str
    at: datetime


def transitions_of(conditions: Sequence[dict[str, Any]],
                   history: Sequence[dict[str, Any]] = ()) -> list[Transition]:
    """The kept transitions and each current condition's own (the latest, which the history
    may not hold yet), oldest first, each once."""
    found: dict[tuple[str, str, datetime], Transition] = {}
    for item in [*history, *conditions]:
        at = parse(item["at"]) if "at" in item else parse(str(item.get("lastTransitionTime", "")))
        if at is None:
            continue
        one = Transition(str(item.get("type", "")), str(item.get("status", "Unknown")),
                         str(item.get("reason", "")), at)
        found.setdefault((one.type, one.status, one.at), one)
    return sorted(found.values(), key=lambda t: t.at)


def condition_timeline(chart_id: str, subject: str, conditions: Sequence[dict[str, Any]],
                       now: datetime, history: Sequence[dict[str, Any]] = ()) -> Markup | None:
    """``None`` when there is nothing dated to draw."""
    flips = transitions_of(conditions, history)
    if not flips:
        return None
    types = _lane_order(conditions, flips)
    start = flips[0].at
    scale = Scale(max((now - start).total_seconds(), 1.0), PLOT_WIDTH)
    series = list(STATUSES.values())
    parts = [chart_title(f"Conditions of {subject} over time (UTC)"),
             defs(chart_id, series), legend(chart_id, series, LABEL_WIDTH, LEGEND_Y)]
    for index, type_ in enumerate(types):
        lane = [t for t in flips if t.type == type_]
        parts.extend(_lane(chart_id, TOP + index * LANE, type_, lane, start, now, scale))
    bottom = TOP + len(types) * LANE
    parts.append(text(LABEL_WIDTH, bottom + 12, start.strftime("%Y-%m-%d %H:%M:%S UTC"),
                      size=11, colour="#5b6675"))
    parts.append(text(LABEL_WIDTH + PLOT_WIDTH, bottom + 12, "now", anchor="end", size=11,
                      colour="#5b6675"))
    return frame(chart_id, f"Conditions of {subject} over time", _description(subject, flips),
                 WIDTH, bottom + 20, "".join(parts))


def _lane_order(conditions: Sequence[dict[str, Any]], flips: list[Transition]) -> list[str]:
    """The current conditions in their order, then types only the history knows."""
    types = [str(c.get("type", "")) for c in conditions]
    return types + sorted({t.type for t in flips} - set(types))


def _lane(chart_id: str, y: float, type_: str, lane: list[Transition], start: datetime,
          now: datetime, scale: Scale) -> list[str]:
    parts = [text(LABEL_WIDTH - 8, y + 12, type_, anchor="end")]
    for n, flip in enumerate(lane):
        until = lane[n + 1].at if n + 1 < len(lane) else now
        x = LABEL_WIDTH + scale((flip.at - start).total_seconds())
        width = max(LABEL_WIDTH + scale((until - start).total_seconds()) - x, 2.0)
        item = STATUSES.get(flip.status, STATUSES["Unknown"])
        parts.append(bar(chart_id, item, x, y, width, LANE - 6,
                         {"condition": type_, "status": flip.status,
                          "since": flip.at.strftime("%Y-%m-%dT%H:%M:%SZ")}))
        if width >= MIN_LABEL:
            solid = item.pattern == "solid"
            parts.append(text(x + 4, y + 12, flip.status, size=11, weight="bold",
                              colour="#fff" if solid else "#1c2430", halo=not solid))
    if lane:
        latest = lane[-1]
        parts.append(text(LABEL_WIDTH + PLOT_WIDTH + 8, y + 12,
                          f"{latest.status} since {latest.at.strftime('%H:%M:%S')}", size=11))
    return parts


def _description(subject: str, flips: list[Transition]) -> str:
    said = "; ".join(f"{t.at.strftime('%Y-%m-%d %H:%M:%S')} UTC {t.type} became {t.status}"
                     + (f" ({t.reason})" if t.reason else "") for t in flips)
    return (f"The condition transitions of {subject} the portal kept, oldest first, each "
            f"status held until the next transition of its condition or now: {said}.")
