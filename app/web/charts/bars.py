"""Horizontal bar charts: bars side by side per group, or stacked into one bar per group.

Horizontal, so that long class names fit on a phone; each bar is labelled with its number (a
stacked segment too narrow for its number is named after the bar's total instead), and the
chart's title is drawn above its legend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from markupsafe import Markup

from app.web.charts.svg import Scale, Series, bar, defs, frame, legend, num, text, ticks
from app.web.charts.svg import title as chart_title

WIDTH = 760
LABEL_WIDTH = 170
PLOT_WIDTH = 440  # and 150 px after it for the totals
LEGEND_Y = 40
TOP = 62
NARROW = 24  # px: a segment narrower than this carries its number after the bar
BAR = 14
GAP = 3
GROUP_GAP = 16


@dataclass(frozen=True)
class Group:
    """One row of the chart (a GPU class) and its figure per series key."""

    label: str
    values: dict[str, int]


# Charts are drawn once per set of figures: a page shown again (a live page every few seconds,
# a list many people watch) draws what it drew a moment ago. Markup is immutable.
DRAWN_KEPT = 128
Frozen = tuple[tuple[str, tuple[tuple[str, int], ...]], ...]


def _frozen(groups: Sequence[Group]) -> Frozen:
    return tuple((group.label, tuple(group.values.items())) for group in groups)


def _thawed(groups: Frozen) -> list[Group]:
    return [Group(label, dict(values)) for label, values in groups]


def _axis(scale: Scale, top: float, bottom: float) -> str:
    lines = []
    for tick in ticks(scale.maximum):
        x = LABEL_WIDTH + scale(tick)
        lines.append(f'<line x1="{num(x)}" y1="{num(top)}" x2="{num(x)}" y2="{num(bottom)}" '
                     f'stroke="#dde2e8" stroke-width="1"/>')
        lines.append(text(x, bottom + 14, tick, anchor="middle", size=11, colour="#5b6675"))
    return f'<g class="axis">{"".join(lines)}</g>'


def _scale(groups: Sequence[Group], keys: Sequence[str], stacked: bool) -> Scale:
    if stacked:
        largest = max((sum(max(g.values.get(k, 0), 0) for k in keys) for g in groups), default=0)
    else:
        largest = max((g.values.get(k, 0) for g in groups for k in keys), default=0)
    return Scale(float(ticks(largest)[-1]), PLOT_WIDTH)


def grouped_bars(chart_id: str, title: str, description: str, groups: Sequence[Group],
                 series: Sequence[Series]) -> Markup:
    """One bar per series in each group, each labelled with its value."""
    return _grouped_bars(chart_id, title, description, _frozen(groups), tuple(series))


@lru_cache(maxsize=DRAWN_KEPT)
def _grouped_bars(chart_id: str, title: str, description: str, frozen: Frozen,
                  series: tuple[Series, ...]) -> Markup:
    groups = _thawed(frozen)
    scale = _scale(groups, [s.key for s in series], stacked=False)
    group_height = len(series) * (BAR + GAP) + GROUP_GAP
    bottom = TOP + len(groups) * group_height
    parts = [chart_title(title), defs(chart_id, series),
             legend(chart_id, series, LABEL_WIDTH, LEGEND_Y),
             _axis(scale, TOP - 4, bottom - GROUP_GAP + 4)]
    for index, group in enumerate(groups):
        y = TOP + index * group_height
        parts.append(text(LABEL_WIDTH - 8, y + BAR + 2, group.label, anchor="end",
                          weight="bold"))
        for row, item in enumerate(series):
            value = group.values.get(item.key, 0)
            top = y + row * (BAR + GAP)
            width = scale(value)
            parts.append(bar(chart_id, item, LABEL_WIDTH, top, width, BAR,
                             {"group": group.label, "series": item.key, "value": value}))
            parts.append(text(LABEL_WIDTH + width + 5, top + BAR - 3,
                              f"{value} {item.label.lower()}", size=11))
    return frame(chart_id, title, description, WIDTH, bottom + 20, "".join(parts))


def stacked_bars(chart_id: str, title: str, description: str, groups: Sequence[Group],
                 stack: Sequence[Series], apart: Series | None = None) -> Markup:
    """The ``stack`` series end to end in one bar per group, its total at the end; ``apart``
    (a figure that overlaps the others, such as GPUs not ready) as a thin bar beneath."""
    return _stacked_bars(chart_id, title, description, _frozen(groups), tuple(stack), apart)


@lru_cache(maxsize=DRAWN_KEPT)
def _stacked_bars(chart_id: str, title: str, description: str, frozen: Frozen,
                  stack: tuple[Series, ...], apart: Series | None) -> Markup:
    groups = _thawed(frozen)
    keys = [s.key for s in stack]
    scale = _scale(groups, keys, stacked=True)
    thin = 7 if apart else 0
    group_height = BAR + thin + GAP + GROUP_GAP + (12 if apart else 0)
    bottom = TOP + len(groups) * group_height
    shown = [*stack, apart] if apart else list(stack)
    parts = [chart_title(title), defs(chart_id, shown),
             legend(chart_id, shown, LABEL_WIDTH - 160, LEGEND_Y),
             _axis(scale, TOP - 4, bottom - GROUP_GAP + 4)]
    for index, group in enumerate(groups):
        y = TOP + index * group_height
        parts.append(text(LABEL_WIDTH - 8, y + BAR - 2, group.label, anchor="end",
                          weight="bold"))
        x = float(LABEL_WIDTH)
        unlabelled = []
        for item in stack:
            value = group.values.get(item.key, 0)
            width = scale(max(value, 0))
            parts.append(bar(chart_id, item, x, y, width, BAR,
                             {"group": group.label, "series": item.key, "value": value}))
            if 0 < width < NARROW:
                unlabelled.append(f"{value} {item.label.lower()}")
            if width >= NARROW:
                solid = item.pattern == "solid"
                parts.append(text(x + width / 2, y + BAR - 3, value, anchor="middle", size=11,
                                  weight="bold", colour="#fff" if solid else "#1c2430",
                                  halo=not solid))
            x += width
        total = sum(group.values.get(k, 0) for k in keys)
        parts.append(text(x + 5, y + BAR - 3, " · ".join([f"{total} total", *unlabelled]),
                          size=11))
        if apart:
            value = group.values.get(apart.key, 0)
            width = scale(value)
            parts.append(bar(chart_id, apart, LABEL_WIDTH, y + BAR + GAP, width, thin,
                             {"group": group.label, "series": apart.key, "value": value}))
            parts.append(text(LABEL_WIDTH + width + 5, y + BAR + GAP + thin + 2,
                              f"{value} {apart.label.lower()}", size=10, colour="#5b6675"))
    return frame(chart_id, title, description, WIDTH, bottom + 20, "".join(parts))
