"""The one capacity chart of every page that shows capacity (Fleet, Fleet by host and region).

Each bar stacks a row's total end to end, without counting a GPU twice: dedicated, guaranteed in
the shared pool, free, and not ready in the shared pool (``total - guaranteed - free``), so the
number at its end is the row's total, as in the table beside it.
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup

from app.gpu_classes.schemas import CapacityFigures
from app.web.charts import palette
from app.web.charts.bars import Group, stacked_bars

SERIES = (palette.kind("dedicated"),
          palette.kind("guaranteed", "Guaranteed in shared pool", key="shared-guaranteed"),
          palette.kind("free"),
          palette.kind("not-ready", "Not ready in shared pool", key="pool-not-ready"))


def pool_not_ready(figures: CapacityFigures) -> int:
    """The shared pool's GPUs on nodes that are not Ready (dedicated ones are in dedicated)."""
    return figures.total - figures.guaranteed - figures.free


def segments(figures: CapacityFigures) -> dict[str, int]:
    """The chart's figures of a row; they add up to its total."""
    # The whole GPUs shares of one GPU take are guaranteed in the shared pool too.
    guaranteed = figures.shared_guaranteed + figures.shared_fraction_gpus
    return {"dedicated": figures.dedicated, "shared-guaranteed": guaranteed,
            "free": figures.free, "pool-not-ready": pool_not_ready(figures)}


def capacity_chart(chart_id: str, title: str,
                   rows: Sequence[tuple[str, CapacityFigures]]) -> Markup | None:
    if not rows:
        return None
    groups = [Group(name, segments(figures)) for name, figures in rows]
    return stacked_bars(chart_id, title, "; ".join(_said(name, f) for name, f in rows), groups,
                        SERIES)


def _said(name: str, f: CapacityFigures) -> str:
    free = f"{f.free} free" if f.free >= 0 else f"overcommitted by {-f.free}"
    return (f"{name}: {f.total} GPUs ({f.ready} ready, {f.not_ready} not ready), "
            f"{f.dedicated} dedicated, {f.shared_guaranteed + f.shared_fraction_gpus} "
            "guaranteed in the shared pool, "
            f"{free}, {pool_not_ready(f)} not ready in the shared pool")
