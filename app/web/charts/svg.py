"""Primitives the charts share: escaping, linear scales, axis ticks, fill patterns, legends and
the accessible frame (role="img", <title>, <desc>).

Every series is told apart by a pattern as well as a colour, and every bar carries its number
as text, so that a chart reads in greyscale and in print; the page's table holds the same
figures for screen readers and for copying.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

FONT = 'font-family="system-ui, sans-serif"'


def attr(value: object) -> str:
    """Text made safe for an attribute or an element's content."""
    return str(escape(str(value)))


def num(value: float) -> str:
    """Coordinates with at most one decimal: short, and stable for golden tests."""
    rounded = round(value, 1)
    return str(int(rounded)) if rounded == int(rounded) else str(rounded)


@dataclass(frozen=True)
class Scale:
    """Maps 0..``maximum`` onto 0..``length`` pixels."""

    maximum: float
    length: float

    def __call__(self, value: float) -> float:
        if self.maximum <= 0:
            return 0.0
        return max(0.0, min(value, self.maximum)) / self.maximum * self.length


def ticks(maximum: float, count: int = 4) -> list[int]:
    """Whole-number ticks from 0 covering ``maximum`` in steps of 1, 2 or 5 times a power of ten."""
    if maximum <= 0:
        return [0]
    raw = maximum / count
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    step = max(1, int(step))
    top = math.ceil(maximum / step) * step
    return list(range(0, int(top) + 1, step))


@dataclass(frozen=True)
class Series:
    """One kind of figure: its key (CSS/data), label, colour and pattern."""

    key: str
    label: str
    colour: str
    pattern: str  # solid | hatch | dots | cross | outline


def pattern_id(chart_id: str, series: Series) -> str:
    return f"{chart_id}-{series.key}"


def fill(chart_id: str, series: Series) -> str:
    if series.pattern == "solid":
        return series.colour
    return f"url(#{pattern_id(chart_id, series)})"


def _pattern(chart_id: str, series: Series) -> str:
    pid, colour = attr(pattern_id(chart_id, series)), attr(series.colour)
    shapes = {
        "hatch": f'<rect width="6" height="6" fill="#fff"/><path d="M0 6L6 0M-1 1L1 -1M5 7L7 5" '
                 f'stroke="{colour}" stroke-width="2"/>',
        "dots": f'<rect width="6" height="6" fill="#fff"/><circle cx="3" cy="3" r="1.5" '
                f'fill="{colour}"/>',
        "cross": f'<rect width="6" height="6" fill="#fff"/><path d="M0 3H6M3 0V6" '
                 f'stroke="{colour}" stroke-width="1.2"/>',
        "outline": '<rect width="6" height="6" fill="#fff"/>',
    }
    return (f'<pattern id="{pid}" width="6" height="6" patternUnits="userSpaceOnUse">'
            f'{shapes[series.pattern]}</pattern>')


def defs(chart_id: str, series: Iterable[Series]) -> str:
    patterns = "".join(_pattern(chart_id, s) for s in series if s.pattern != "solid")
    return f"<defs>{patterns}</defs>" if patterns else ""


def bar(chart_id: str, series: Series, x: float, y: float, width: float, height: float,
        data: dict[str, object]) -> str:
    """A rectangle with its series' fill and an outline (which an empty pattern needs)."""
    extra = "".join(f' data-{key}="{attr(value)}"' for key, value in data.items())
    return (f'<rect class="bar bar-{attr(series.key)}" x="{num(x)}" y="{num(y)}" '
            f'width="{num(width)}" height="{num(height)}" fill="{fill(chart_id, series)}" '
            f'stroke="{attr(series.colour)}" stroke-width="1"{extra}/>')


def text(x: float, y: float, content: object, *, anchor: str = "start", size: int = 12,
         weight: str = "normal", colour: str = "#1c2430", halo: bool = False) -> str:
    """A label; ``halo`` outlines it in white so that it reads on a patterned bar."""
    outline = ' stroke="#fff" stroke-width="3" paint-order="stroke"' if halo else ""
    return (f'<text x="{num(x)}" y="{num(y)}" text-anchor="{anchor}" font-size="{size}" '
            f'font-weight="{weight}" fill="{colour}"{outline} {FONT}>{attr(content)}</text>')


def title(content: str) -> str:
    """The chart's title, drawn at its top (the <title> alone shows only on hover)."""
    return (f'<text class="chart-title" x="10" y="16" font-size="14" font-weight="bold" '
            f'fill="#1c2430" {FONT}>{attr(content)}</text>')


def legend(chart_id: str, series: Sequence[Series], x: float, y: float) -> str:
    """Swatch and label per series, in a row."""
    parts, at = [], x
    for item in series:
        parts.append(bar(chart_id, item, at, y - 10, 14, 12, {"legend": item.key}))
        parts.append(text(at + 19, y, item.label))
        at += 30 + 7 * len(item.label)
    return f'<g class="legend">{"".join(parts)}</g>'


def frame(chart_id: str, title: str, description: str, width: float, height: float,
          body: str) -> Markup:
    """The accessible wrapper: a named image whose description says what it shows."""
    cid = attr(chart_id)
    return Markup(  # noqa: S704 - every text and attribute in it went through attr()
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="{cid}" role="img" '
        f'viewBox="0 0 {num(width)} {num(height)}" preserveAspectRatio="xMinYMin meet" '
        f'aria-labelledby="{cid}-title {cid}-desc">'
        f'<title id="{cid}-title">{attr(title)}</title>'
        f'<desc id="{cid}-desc">{attr(description)}</desc>{body}</svg>'
    )
