"""Server-rendered SVG time-series charts: stacked bars and lines over labelled periods.

Accessible by construction: each chart is an ``img`` with a ``<title>`` (also drawn as the
chart's visible heading) and a ``<desc>`` that reads out every figure; every series has its own
fill pattern (bars) or dash and marker (lines) besides its colour, and a legend that names it,
so nothing depends on telling colours apart. Each bar and point carries its series, period and
exact value as ``data-*`` attributes, and pages put the same figures in a table next to the
chart. A period without a record (``None``) is a gap in a line, never a made-up value.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

# A drawing about as wide as it is shown (a grid cell of 600 px, the figure's 520 px at least),
# so that its text is drawn near the sizes below: 13 px figures, 14 px legend, 16 px title.
WIDTH, HEIGHT = 560, 300
LEFT, RIGHT, TOP, BOTTOM = 60, 12, 46, 48
TITLE_Y = 22
LEGEND_ROW = 20
TITLE_SIZE, LEGEND_SIZE, FIGURE_SIZE = 16, 14, 13
CHAR_WIDTH = 0.6  # of the font size: how wide a character of a label is, about
COLOURS = ("#2f6f4f", "#c47f17", "#3a5f9e", "#8c3b6b", "#5b6675", "#a32020")
# Fill patterns for bars, one per series: solid, hatched, dotted, crossed, ...
PATTERNS = ("solid", "hatch", "dots", "cross", "backhatch", "grid")
DASHES = ("", "6 3", "2 3", "10 4 2 4", "1 5", "12 2")
MARKERS = ("circle", "square", "diamond", "triangle", "circle", "square")
_ids = itertools.count(1)


@dataclass(frozen=True)
class Series:
    """One series; ``None`` is a period with no record. Without a colour and pattern of its
    own (``app.web.charts.palette``) the n-th series takes the n-th default."""

    label: str
    values: Sequence[float | None]
    colour: str | None = None
    pattern: str | None = None


def _colour(series: Sequence[Series], n: int) -> str:
    return series[n].colour or COLOURS[n % len(COLOURS)]


def _pattern(series: Sequence[Series], n: int) -> str:
    given = series[n].pattern
    if given is None:
        return PATTERNS[n % len(PATTERNS)]
    return "grid" if given == "outline" else given


@dataclass(frozen=True)
class _Frame:
    categories: Sequence[str]
    top: float

    @property
    def plot_width(self) -> float:
        return WIDTH - LEFT - RIGHT

    @property
    def plot_height(self) -> float:
        return HEIGHT - TOP - BOTTOM

    def slot(self) -> float:
        return self.plot_width / max(len(self.categories), 1)

    def x(self, index: int) -> float:
        return LEFT + self.slot() * (index + 0.5)

    def y(self, value: float) -> float:
        return TOP + self.plot_height * (1 - value / self.top)


def nice_top(largest: float) -> float:
    """A round axis maximum at or above ``largest`` (1, 2 or 5 times a power of ten)."""
    if largest <= 0:
        return 1.0
    magnitude = 10 ** len(str(int(largest))) / 10
    for step in (1, 2, 5, 10):
        if largest <= step * magnitude:
            return float(step * magnitude)
    return float(10 * magnitude)


def number(value: float) -> str:
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def _defs(prefix: str, series: Sequence[Series]) -> str:
    shapes = {
        "solid": "",
        "hatch": '<path d="M0,8 L8,0" stroke="#fff" stroke-width="2"/>',
        "dots": '<circle cx="4" cy="4" r="1.6" fill="#fff"/>',
        "cross": '<path d="M0,4 H8 M4,0 V8" stroke="#fff" stroke-width="1.5"/>',
        "backhatch": '<path d="M0,0 L8,8" stroke="#fff" stroke-width="2"/>',
        "grid": '<path d="M0,0 H8 V8" fill="none" stroke="#fff" stroke-width="1.5"/>',
    }
    patterns = []
    for n in range(len(series)):
        colour, shape = _colour(series, n), shapes[_pattern(series, n)]
        patterns.append(f'<pattern id="{prefix}-p{n}" width="8" height="8" '
                        f'patternUnits="userSpaceOnUse"><rect width="8" height="8" '
                        f'fill="{colour}"/>{shape}</pattern>')
    return f"<defs>{''.join(patterns)}</defs>"


def _axes(frame: _Frame, unit: str) -> str:
    parts = []
    for step in range(5):
        value = frame.top * step / 4
        y = frame.y(value)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="#dde2e8"/><text x="{LEFT - 6}" y="{y + 4:.1f}" '
                     f'text-anchor="end" font-size="{FIGURE_SIZE}">{number(value)}</text>')
    # As many labels as fit side by side, evenly spaced.
    widest = max((len(label) for label in frame.categories), default=1) * (
        CHAR_WIDTH * FIGURE_SIZE) + 12
    every = max(1, math.ceil(len(frame.categories) * widest / frame.plot_width))
    for n, label in enumerate(frame.categories):
        if n % every == 0:
            parts.append(f'<text x="{frame.x(n):.1f}" y="{HEIGHT - BOTTOM + 18}" '
                         f'text-anchor="middle" font-size="{FIGURE_SIZE}">{escape(label)}</text>')
    parts.append(f'<text x="14" y="{TOP + frame.plot_height / 2:.1f}" '
                 f'font-size="{FIGURE_SIZE}" '
                 f'transform="rotate(-90 14 {TOP + frame.plot_height / 2:.1f})" '
                 f'text-anchor="middle">{escape(unit)}</text>')
    return "".join(parts)


def _legend_places(series: Sequence[Series]) -> list[tuple[float, int]]:
    """(x, row) of each legend item: side by side, on a new row when the next would not fit."""
    places, x, row = [], float(LEFT), 0
    for one in series:
        width = 40 + len(one.label) * CHAR_WIDTH * LEGEND_SIZE
        if x + width > WIDTH - RIGHT and x > LEFT:
            x, row = float(LEFT), row + 1
        places.append((x, row))
        x += width
    return places


def _height(series: Sequence[Series]) -> int:
    rows = 1 + max((row for _x, row in _legend_places(series)), default=0)
    return HEIGHT + LEGEND_ROW * (rows - 1)


def _legend(prefix: str, series: Sequence[Series], *, lines: bool) -> str:
    items = []
    for n, (one, (x, row)) in enumerate(zip(series, _legend_places(series), strict=True)):
        y = HEIGHT - 12 + row * LEGEND_ROW
        if lines:
            swatch = (f'<line x1="{x}" x2="{x + 22}" y1="{y - 4}" y2="{y - 4}" '
                      f'stroke="{_colour(series, n)}" stroke-width="2.5" '
                      f'stroke-dasharray="{DASHES[n % len(DASHES)]}"/>'
                      + _marker(MARKERS[n % len(MARKERS)], x + 11, y - 4, _colour(series, n)))
        else:
            swatch = (f'<rect x="{x}" y="{y - 10}" width="14" height="12" '
                      f'fill="url(#{prefix}-p{n})" stroke="#1c2430" stroke-width=".5"/>')
        items.append(f'<g class="legend-item">{swatch}<text x="{x + 28}" y="{y}" '
                     f'font-size="{LEGEND_SIZE}">{escape(one.label)}</text></g>')
    return "".join(items)


def _figures(categories: Sequence[str], series: Sequence[Series], unit: str) -> str:
    """Every figure in words, for the description."""
    said = []
    for one in series:
        values = ", ".join(f"{category} {'no record' if value is None else number(value)}"
                           for category, value in zip(categories, one.values, strict=True))
        said.append(f"{one.label} ({unit}): {values}")
    return " Figures: " + "; ".join(said) + "." if said else ""


def _title_lines(title: str) -> list[str]:
    """The title in lines that fit the drawing's width, broken between words."""
    room = int((WIDTH - LEFT - RIGHT) / (CHAR_WIDTH * TITLE_SIZE))
    found: list[str] = []
    for word in title.split():
        if found and len(found[-1]) + 1 + len(word) <= room:
            found[-1] += " " + word
        else:
            found.append(word)
    return found or [""]


def _open(prefix: str, title: str, description: str, series: Sequence[Series]) -> str:
    """The drawing's frame and title; what follows is drawn below the title's lines (closed by
    ``_svg``)."""
    lines = _title_lines(title)
    below = (len(lines) - 1) * (TITLE_SIZE + 4)
    drawn = "".join(f'<tspan x="{LEFT}" dy="{0 if n == 0 else TITLE_SIZE + 4}">{escape(line)}'
                    "</tspan>" for n, line in enumerate(lines))
    return (f'<svg class="chart" viewBox="0 0 {WIDTH} {_height(series) + below}" role="img" '
            f'aria-labelledby="{prefix}-title {prefix}-desc" '
            f'xmlns="http://www.w3.org/2000/svg" font-family="system-ui, sans-serif">'
            f'<title id="{prefix}-title">{escape(title)}</title>'
            f'<desc id="{prefix}-desc">{escape(description)}</desc>'
            f'<text class="chart-title" x="{LEFT}" y="{TITLE_Y}" font-size="{TITLE_SIZE}" '
            f'font-weight="bold" fill="#1c2430" aria-hidden="true">{drawn}</text>'
            f'<g transform="translate(0 {below})">')


def _svg(*parts: str) -> Markup:
    # Every label, title and unit went through escape() where it was put in; numbers and
    # constants are the only other text.
    return Markup("".join(parts) + "</g></svg>")  # noqa: S704


def stacked_bars(title: str, description: str, categories: Sequence[str],
                 series: Sequence[Series], unit: str) -> Markup:
    """One bar per category, the series stacked in order from the bottom."""
    prefix = f"chart{next(_ids)}"
    totals = [sum(s.values[n] or 0.0 for s in series) for n in range(len(categories))]
    frame = _Frame(categories, nice_top(max(totals, default=0.0)))
    width = frame.slot() * 0.7
    bars = []
    for n, category in enumerate(categories):
        base = 0.0
        for k, one in enumerate(series):
            value = one.values[n] or 0.0
            if value <= 0:
                continue
            top, bottom = frame.y(base + value), frame.y(base)
            bars.append(
                f'<rect class="bar" x="{frame.x(n) - width / 2:.1f}" y="{top:.1f}" '
                f'width="{width:.1f}" height="{bottom - top:.1f}" fill="url(#{prefix}-p{k})" '
                f'stroke="#1c2430" stroke-width=".5" data-series="{escape(one.label)}" '
                f'data-category="{escape(category)}" data-value="{value!r}">'
                f'<title>{escape(one.label)}, {escape(category)}: {number(value)} '
                f'{escape(unit)}</title></rect>')
            base += value
    return _svg(_open(prefix, title, description + _figures(categories, series, unit), series),
                _defs(prefix, series), _axes(frame, unit), *bars,
                _legend(prefix, series, lines=False))


def _marker(shape: str, x: float, y: float, colour: str) -> str:
    if shape == "square":
        return f'<rect x="{x - 3.5:.1f}" y="{y - 3.5:.1f}" width="7" height="7" fill="{colour}"/>'
    if shape == "diamond":
        return (f'<path d="M{x:.1f},{y - 4.5:.1f} l4.5,4.5 l-4.5,4.5 l-4.5,-4.5 z" '
                f'fill="{colour}"/>')
    if shape == "triangle":
        return (f'<path d="M{x:.1f},{y - 4.5:.1f} l4.5,8 h-9 z" fill="{colour}"/>')
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}"/>'


def _runs(points: Sequence[tuple[float, float] | None]) -> list[list[tuple[float, float]]]:
    """The unbroken stretches of a line: a period without a record ends one."""
    runs: list[list[tuple[float, float]]] = [[]]
    for point in points:
        if point is None:
            runs.append([])
        else:
            runs[-1].append(point)
    return [run for run in runs if run]


def lines(title: str, description: str, categories: Sequence[str],
          series: Sequence[Series], unit: str) -> Markup:
    """One line per series across the categories, each with its own dash and marker; a
    series without a record for a period has a gap there."""
    prefix = f"chart{next(_ids)}"
    largest = max((v for s in series for v in s.values if v is not None), default=0.0)
    frame = _Frame(categories, nice_top(largest))
    drawn = []
    for k, one in enumerate(series):
        colour = _colour(series, k)
        points = [None if v is None else (frame.x(n), frame.y(v))
                  for n, v in enumerate(one.values)]
        paths = "".join(
            f'<polyline points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in run)}" fill="none" '
            f'stroke-width="2" stroke="{colour}" stroke-dasharray="{DASHES[k % len(DASHES)]}"/>'
            for run in _runs(points))
        marks = "".join(
            f'<g class="point" data-series="{escape(one.label)}" '
            f'data-category="{escape(categories[n])}" data-value="{one.values[n]!r}">'
            f'{_marker(MARKERS[k % len(MARKERS)], point[0], point[1], colour)}'
            f'<title>{escape(one.label)}, {escape(categories[n])}: '
            f'{number(one.values[n] or 0.0)} {escape(unit)}</title></g>'
            for n, point in enumerate(points) if point is not None)
        drawn.append(paths + marks)
    return _svg(_open(prefix, title, description + _figures(categories, series, unit), series),
                _axes(frame, unit), *drawn, _legend(prefix, series, lines=True))


def grouped_bars(title: str, description: str, categories: Sequence[str],
                 series: Sequence[Series], unit: str) -> Markup:
    """Side by side bars per category, one per series (e.g. approved, allocated, in use),
    each with its number above it."""
    prefix = f"chart{next(_ids)}"
    largest = max((v or 0.0 for s in series for v in s.values), default=0.0)
    frame = _Frame(categories, nice_top(largest))
    width = frame.slot() * 0.8 / max(len(series), 1)
    bars = []
    for n, category in enumerate(categories):
        start = frame.x(n) - width * len(series) / 2
        for k, one in enumerate(series):
            value = one.values[n] or 0.0
            top = frame.y(value)
            bars.append(
                f'<rect class="bar" x="{start + k * width:.1f}" y="{top:.1f}" '
                f'width="{width * 0.9:.1f}" height="{frame.y(0) - top:.1f}" '
                f'fill="url(#{prefix}-p{k})" stroke="#1c2430" stroke-width=".5" '
                f'data-series="{escape(one.label)}" data-category="{escape(category)}" '
                f'data-value="{value!r}"><title>{escape(one.label)}, {escape(category)}: '
                f'{number(value)} {escape(unit)}</title></rect>')
            # Each bar's number above it, readable without the table or a hover.
            bars.append(f'<text class="bar-value" x="{start + k * width + width * 0.45:.1f}" '
                        f'y="{top - 4:.1f}" text-anchor="middle" font-size="{FIGURE_SIZE}" '
                        f'font-weight="bold" fill="#1c2430">{number(value)}</text>')
    return _svg(_open(prefix, title, description + _figures(categories, series, unit), series),
                _defs(prefix, series), _axes(frame, unit), *bars,
                _legend(prefix, series, lines=False))
