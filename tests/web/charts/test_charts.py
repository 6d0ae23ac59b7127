"""The SVG charts: golden renderings, the accessible structure, patterns as well as colours,
escaping, and the numbers each bar carries.

UPDATE_GOLDEN=1 rewrites tests/web/charts/golden/*.svg from the current functions.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path

from app.gpu_classes.charts import SERIES as CAPACITY_SERIES
from app.pages.dashboard import QUOTA_SERIES
from app.web.charts.bars import Group, grouped_bars, stacked_bars
from app.web.charts.svg import ticks
from app.web.charts.timeline import condition_timeline

GOLDEN = Path(__file__).parent / "golden"
SVG = "{http://www.w3.org/2000/svg}"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

QUOTA = [Group("H100 80GB", {"approved": 16, "allocated": 12, "in-use": 12}),
         Group("L40S", {"approved": 4, "allocated": 0, "in-use": 0})]
FLEET = [Group("H100 80GB", {"dedicated": 16, "shared-guaranteed": 24, "free": 16,
                             "pool-not-ready": 8}),
         Group("GB200", {"dedicated": 0, "shared-guaranteed": 4, "free": 32, "pool-not-ready": 0})]


def _at(minutes_ago: int) -> str:
    return (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


CONDITIONS = [{"type": "NamespaceReady", "status": "True", "lastTransitionTime": _at(30)},
              {"type": "ReleaseInstalled", "status": "False", "lastTransitionTime": _at(27)},
              {"type": "Ready", "status": "Unknown", "lastTransitionTime": _at(2)}]


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text()


def _bars(svg: str) -> list[dict[str, str]]:
    root = ET.fromstring(svg)  # noqa: S314 - the SVG under test, made by this test
    return [dict(rect.attrib) for rect in root.iter(f"{SVG}rect") if "data-value" in rect.attrib
            or "data-status" in rect.attrib]


def _accessible(svg: str, chart_id: str) -> ET.Element:
    root = ET.fromstring(svg)  # noqa: S314 - well-formed XML, or this raises
    assert root.get("role") == "img"
    assert root.get("aria-labelledby") == f"{chart_id}-title {chart_id}-desc"
    title, desc = root.find(f"{SVG}title"), root.find(f"{SVG}desc")
    assert title is not None and title.get("id") == f"{chart_id}-title" and title.text
    assert desc is not None and desc.get("id") == f"{chart_id}-desc" and desc.text
    return root


def test_quota_bars_match_the_golden_rendering() -> None:
    svg = grouped_bars("quota-chart", "GPU quota of Acme", "H100: 16 approved", QUOTA,
                       QUOTA_SERIES)
    check_golden("quota.svg", str(svg))
    _accessible(str(svg), "quota-chart")
    values = {(b["data-group"], b["data-series"]): int(b["data-value"]) for b in _bars(svg)}
    assert values == {("H100 80GB", "approved"): 16, ("H100 80GB", "allocated"): 12,
                      ("H100 80GB", "in-use"): 12, ("L40S", "approved"): 4,
                      ("L40S", "allocated"): 0, ("L40S", "in-use"): 0}
    assert "12 allocated" in svg and "4 approved" in svg  # numbers as text, not only lengths


def test_fleet_capacity_stacks_match_the_golden_rendering() -> None:
    svg = stacked_bars("capacity-chart", "Fleet capacity", "H100: 64 GPUs", FLEET,
                       CAPACITY_SERIES)
    check_golden("capacity.svg", str(svg))
    _accessible(str(svg), "capacity-chart")
    h100 = [b for b in _bars(svg) if b["data-group"] == "H100 80GB"]
    widths = {b["data-series"]: float(b["width"]) for b in h100}
    # The stack is proportional: 16 + 24 + 16 + 8 end to end, each GPU once, to the total.
    assert widths["shared-guaranteed"] == 1.5 * widths["dedicated"]
    assert widths["free"] == widths["dedicated"] == 2 * widths["pool-not-ready"]
    assert "64 total" in svg and "36 total" in svg


def test_series_differ_by_pattern_not_colour_alone() -> None:
    svg = str(stacked_bars("c", "t", "d", FLEET, CAPACITY_SERIES))
    fills = {b["data-series"]: b["fill"] for b in _bars(svg)}
    assert len(set(fills.values())) == 4
    patterned = [f for f in fills.values() if f.startswith("url(#")]
    assert len(patterned) == 3  # the one solid series is told apart by the three patterns
    for fill in patterned:
        assert f'<pattern id="{fill[5:-1]}"' in svg
    legend = re.findall(r'data-legend="([^"]+)"', svg)
    assert legend == ["dedicated", "shared-guaranteed", "free", "pool-not-ready"]


def test_labels_and_descriptions_are_escaped() -> None:
    hostile = '<script>alert(1)</script>"&'
    svg = str(grouped_bars("x", hostile, hostile, [Group(hostile, {"approved": 1})],
                           QUOTA_SERIES))
    root = _accessible(svg, "x")
    assert "<script>" not in svg
    assert root.find(f"{SVG}title") is not None
    assert root.find(f"{SVG}title").text == hostile  # type: ignore[union-attr]


def test_the_condition_timeline_draws_one_lane_per_condition() -> None:
    svg = condition_timeline("conditions-chart", "train", CONDITIONS, NOW)
    assert svg is not None
    check_golden("timeline.svg", str(svg))
    root = _accessible(str(svg), "conditions-chart")
    lanes = [(b["data-condition"], b["data-status"], b["data-since"]) for b in _bars(svg)]
    assert lanes == [(c["type"], c["status"], c["lastTransitionTime"]) for c in CONDITIONS]
    desc = root.find(f"{SVG}desc")
    assert desc is not None and desc.text is not None
    assert "2026-11-30 11:58:00 UTC Ready became Unknown" in desc.text
    assert "False since 11:33:00</text>" in svg  # status in words, not only a pattern


def _flip(type_: str, status: str, minutes_ago: int, reason: str = "") -> dict[str, object]:
    return {"type": type_, "status": status, "reason": reason,
            "at": NOW - timedelta(minutes=minutes_ago)}


def test_the_timeline_shows_each_kept_flip_not_only_the_latest() -> None:
    """Ready went True, then False for a while, then True again: the table shows only "True
    since 5 min", the timeline each status it held."""
    current = [{"type": "Ready", "status": "True", "lastTransitionTime": _at(5)}]
    history = [_flip("Ready", "True", 40), _flip("Ready", "False", 20, "HostUnreachable"),
               _flip("Ready", "True", 5)]
    svg = condition_timeline("conditions-chart", "train", current, NOW, history)
    assert svg is not None
    segments = [(b["data-status"], b["data-since"]) for b in _bars(svg)]
    assert segments == [("True", _at(40)), ("False", _at(20)), ("True", _at(5))]
    widths = [float(b["width"]) for b in _bars(svg)]
    assert widths[0] == widths[1] * 4 / 3  # 20 min against 15 min
    root = _accessible(str(svg), "conditions-chart")
    desc = root.find(f"{SVG}desc")
    assert desc is not None and desc.text is not None
    assert "2026-11-30 11:40:00 UTC Ready became False (HostUnreachable)" in desc.text


def test_every_chart_shows_its_title() -> None:
    """The title is drawn as text at the top, not only kept in <title> for screen readers."""
    charts = [grouped_bars("q", "GPU quota of Acme (GPUs)", "d", QUOTA, QUOTA_SERIES),
              stacked_bars("c", "GPUs per GPU class", "d", FLEET, CAPACITY_SERIES),
              condition_timeline("t", "train", CONDITIONS, NOW)]
    for chart, title in zip(charts, ["GPU quota of Acme (GPUs)", "GPUs per GPU class",
                                     "Conditions of train over time (UTC)"], strict=True):
        root = ET.fromstring(str(chart))  # noqa: S314 - made by this test
        drawn = [t.text for t in root.iter(f"{SVG}text")]
        assert drawn[0] == title


def test_a_segment_too_narrow_for_its_number_is_named_after_the_total() -> None:
    groups = [Group("GB200", {"dedicated": 1, "shared-guaranteed": 3, "free": 60,
                              "pool-not-ready": 0})]
    svg = str(stacked_bars("c", "t", "d", groups, CAPACITY_SERIES))
    assert "64 total · 1 dedicated · 3 guaranteed in shared pool" in svg
    assert ">60</text>" in svg  # wide enough: its number sits inside


def test_no_conditions_no_timeline() -> None:
    assert condition_timeline("c", "train", [], NOW) is None
    assert condition_timeline("c", "train", [{"type": "Ready", "status": "True"}], NOW) is None


def test_ticks_are_round_and_cover_the_largest_value() -> None:
    assert ticks(0) == [0]
    assert ticks(16) == [0, 5, 10, 15, 20]
    assert ticks(64) == [0, 20, 40, 60, 80]
    assert ticks(3) == [0, 1, 2, 3]
    assert ticks(1000)[-1] >= 1000


def test_a_chart_is_drawn_from_the_figures_it_is_given_each_time() -> None:
    """Charts are kept per set of figures: the same figures give the same drawing, and a
    figure that moved (a class, a series, a value) is drawn as it is now, never as it was."""
    first = stacked_bars("fleet", "GPUs", "d", FLEET, CAPACITY_SERIES)
    assert stacked_bars("fleet", "GPUs", "d", list(FLEET), CAPACITY_SERIES) == first
    moved = [FLEET[0], Group("GB200", {**FLEET[1].values, "free": 31})]
    redrawn = stacked_bars("fleet", "GPUs", "d", moved, CAPACITY_SERIES)
    assert redrawn != first and 'data-value="31"' in redrawn
    assert 'data-value="31"' not in stacked_bars("fleet", "GPUs", "d", FLEET, CAPACITY_SERIES)
    quota = grouped_bars("quota", "Quota", "d", QUOTA, QUOTA_SERIES)
    less = [Group("H100 80GB", {"approved": 16, "allocated": 11, "in-use": 12}), QUOTA[1]]
    assert grouped_bars("quota", "Quota", "d", less, QUOTA_SERIES) != quota
    assert grouped_bars("quota", "Quota", "d", QUOTA, QUOTA_SERIES) == quota
