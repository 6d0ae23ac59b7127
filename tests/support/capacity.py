"""Reading the capacity figures off every surface that shows them: the API's objects, the pages'
tables (cells named by figure), their charts (bars carrying their values) and the queue's line."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

FIGURES = ("total", "ready", "not_ready", "dedicated", "guaranteed", "shared_guaranteed", "free",
           "in_use", "borrowed", "lent_from_idle_guarantees")
# A page names a figure's cell by its CSS class.
CSS = {figure: figure.replace("_", "-") for figure in FIGURES} | {
    "lent_from_idle_guarantees": "lent"}

Figures = dict[str, float]


def of_api(row: dict[str, Any]) -> Figures:
    return {figure: float(row[figure]) for figure in FIGURES}


def rows_of(page: str, table_id: str, keys: Sequence[str]) -> dict[tuple[str, ...], Figures]:
    """Each row of the table ``table_id`` by the values of its ``data-<key>`` attributes, with
    every figure whose cell (or span) it holds."""
    start = page.index(f'id="{table_id}"')
    table = page[start:page.index("</table>", start)]
    found: dict[tuple[str, ...], dict[str, float]] = {}
    for attributes, cells in re.findall(r"<tr ([^>]*data-[^>]*)>(.*?)</tr>", table, re.S):
        data = {name: html.unescape(value)
                for name, value in re.findall(r'data-([\w-]+)="([^"]*)"', attributes)}
        figures = {figure: float(cell.group(1)) for figure in FIGURES
                   if (cell := re.search(rf'class="{CSS[figure]}">(-?[\d.]+)<', cells))}
        found[tuple(data[key] for key in keys)] = figures
    return found


def queue_rows_of(page: str) -> dict[tuple[str, ...], Figures]:
    """The approval queue: each request's class capacity line, by class and region."""
    start = page.index('id="queue"')
    table = page[start:page.index("</table>", start)]
    found: dict[tuple[str, ...], dict[str, float]] = {}
    for attributes, cells in re.findall(r'<tr (id="queue-[^>]*)>(.*?)</tr>', table, re.S):
        data = dict(re.findall(r'data-([\w-]+)="([^"]*)"', attributes))
        line = re.search(r'class="figures capacity">(.*?)</td>', cells, re.S)
        assert line, attributes
        found[data["gpu-class"], data["region"]] = {
            figure: float(cell.group(1)) for figure in FIGURES
            if (cell := re.search(rf'class="{CSS[figure]}">(-?[\d.]+)<', line.group(1)))}
    return found


def chart_of(page: str, chart_id: str) -> dict[str, dict[str, int]]:
    """Each bar of a chart by its label: the value of each stacked segment."""
    start = page.index(f'id="{chart_id}"')
    svg = page[start:page.index("</svg>", start)]
    bars: dict[str, dict[str, int]] = {}
    for group, series, value in re.findall(
            r'data-group="([^"]+)" data-series="([^"]+)" data-value="(-?\d+)"', svg):
        bars.setdefault(html.unescape(group), {})[series] = int(value)
    return bars


def charted(figures: Figures) -> dict[str, int]:
    """What a capacity chart's bar stacks for a row of figures: each GPU once, to the total."""
    return {"dedicated": int(figures["dedicated"]),
            "shared-guaranteed": int(figures["shared_guaranteed"]),
            "free": int(figures["free"]),
            "pool-not-ready": int(figures["total"] - figures["guaranteed"] - figures["free"])}
