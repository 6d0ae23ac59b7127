"""A cluster's conditions on a time axis: one lane per condition, from its last transition to
now, patterned by status. Only the latest transition of each condition is stored, so the lanes
show how long each current status has held, not earlier flips; the description says so."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from markupsafe import Markup

from app.web.charts.svg import Scale, Series, bar, defs, frame, legend, text
from app.web.times import ago, parse

WIDTH = 640
LABEL_WIDTH = 170
PLOT_WIDTH = 440
TOP = 40
LANE = 22

STATUSES = {
    "True": Series("true", "True", "#1f7a3a", "solid"),
    "False": Series("false", "False", "#a32020", "hatch"),
    "Unknown": Series("unknown", "Unknown", "#9a5b00", "dots"),
}


def condition_timeline(chart_id: str, subject: str, conditions: Sequence[dict[str, Any]],
                       now: datetime) -> Markup | None:
    """``None`` when there are no conditions to draw."""
    lanes = [(c, parse(str(c.get("lastTransitionTime", "")))) for c in conditions]
    dated = [(c, since) for c, since in lanes if since is not None]
    if not dated:
        return None
    start = min(since for _c, since in dated)
    span = max((now - start).total_seconds(), 1.0)
    scale = Scale(span, PLOT_WIDTH)
    series = list(STATUSES.values())
    parts = [defs(chart_id, series), legend(chart_id, series, LABEL_WIDTH, 18)]
    for index, (condition, since) in enumerate(dated):
        y = TOP + index * LANE
        status = str(condition.get("status", "Unknown"))
        item = STATUSES.get(status, STATUSES["Unknown"])
        x = LABEL_WIDTH + scale((since - start).total_seconds())
        width = max(LABEL_WIDTH + PLOT_WIDTH - x, 2.0)
        parts.append(text(LABEL_WIDTH - 8, y + 12, condition.get("type", ""), anchor="end"))
        parts.append(bar(chart_id, item, x, y, width, LANE - 6,
                         {"condition": condition.get("type", ""), "status": status,
                          "since": since.strftime("%Y-%m-%dT%H:%M:%SZ")}))
        label = f"{status} since {since.strftime('%H:%M:%S')} ({ago(since, now)})"
        outside = x > LABEL_WIDTH + PLOT_WIDTH / 2
        on_solid = not outside and item.pattern == "solid"
        parts.append(text(x - 4 if outside else x + 4, y + 12, label, size=11,
                          anchor="end" if outside else "start",
                          colour="#fff" if on_solid else "#1c2430",
                          halo=not outside and not on_solid))
    bottom = TOP + len(dated) * LANE
    parts.append(text(LABEL_WIDTH, bottom + 12, start.strftime("%H:%M:%S UTC"), size=11,
                      colour="#5b6675"))
    parts.append(text(LABEL_WIDTH + PLOT_WIDTH, bottom + 12, "now", anchor="end", size=11,
                      colour="#5b6675"))
    description = (
        f"Each condition of {subject} as a lane from its last transition to now: "
        + "; ".join(f"{c.get('type')} {c.get('status')} since "
                    f"{since.strftime('%Y-%m-%d %H:%M:%S')} UTC" for c, since in dated)
        + ". Only the latest transition of each condition is stored, not earlier ones."
    )
    return frame(chart_id, f"Conditions of {subject} over time", description, WIDTH,
                 bottom + 20, "".join(parts))
