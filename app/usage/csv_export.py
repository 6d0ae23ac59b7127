"""The usage report as CSV: fixed columns, numbers as in the JSON, no formulas for spreadsheets.

A row is per tenant, class, unit and MIG profile: the ``*_gpu_hours`` are GPU-hours (whole
GPUs and shares as fractions; 0 on a MIG row), and the last columns say the unit (``gpu``,
``shared`` or ``mig``), the profile and a MIG row's slice-hours.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator

from app.usage.schemas import ClusterUsageRow, UsageRow

WHOLE_GPU_COLUMNS = ("period", "period_start", "period_end", "tenant", "gpu_class",
                     "approved_gpu_hours", "allocated_gpu_hours", "dedicated_gpu_hours",
                     "used_gpu_hours", "allocated_gpu_seconds", "guaranteed_gpu_hours",
                     "burst_gpu_hours", "slept_gpu_hours", "shared_pool_gpu_hours",
                     "utilised_gpu_hours", "utilisation_coverage")
WHOLE_GPU_CLUSTER_COLUMNS = ("period", "period_start", "period_end", "tenant", "cluster",
                             "gpu_class", "allocated_gpu_hours", "used_gpu_hours",
                             "guaranteed_gpu_hours", "burst_gpu_hours", "slept_gpu_hours",
                             "utilised_gpu_hours", "utilisation_coverage")
# A MIG row's hours are these slice-hours; its *_gpu_hours are 0.
UNIT_COLUMNS = ("unit", "mig_profile", "approved_slice_hours", "allocated_slice_hours",
                "used_slice_hours")
COLUMNS: tuple[str, ...] = (*WHOLE_GPU_COLUMNS, *UNIT_COLUMNS)
CLUSTER_COLUMNS: tuple[str, ...] = (*WHOLE_GPU_CLUSTER_COLUMNS, *UNIT_COLUMNS)
# New columns go at the end: readers index the columns (app.lab.demo reads column 8).
# A spreadsheet evaluates a cell that starts with one of these as a formula.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_ROWS_PER_CHUNK = 500


def neutralised(cell: str) -> str:
    """A leading quote makes spreadsheets show the text instead of evaluating it."""
    return f"'{cell}" if cell.startswith(_FORMULA_STARTS) else cell


def _cells(row: UsageRow) -> list[str]:
    return [neutralised(row.period), row.period_start.isoformat(), row.period_end.isoformat(),
            neutralised(row.tenant), neutralised(row.gpu_class),
            _number(row.approved_gpu_hours), _number(row.allocated_gpu_hours),
            _number(row.dedicated_gpu_hours), _number(row.used_gpu_hours),
            str(row.allocated_gpu_seconds), _number(row.guaranteed_gpu_hours),
            _number(row.burst_gpu_hours), _number(row.slept_gpu_hours),
            _number(row.shared_pool_gpu_hours), _maybe(row.utilised_gpu_hours),
            _maybe(row.utilisation_coverage), *_unit_cells(row)]


def _cluster_cells(row: ClusterUsageRow) -> list[str]:
    return [neutralised(row.period), row.period_start.isoformat(), row.period_end.isoformat(),
            neutralised(row.tenant), neutralised(row.cluster), neutralised(row.gpu_class),
            _number(row.allocated_gpu_hours), _number(row.used_gpu_hours),
            _number(row.guaranteed_gpu_hours), _number(row.burst_gpu_hours),
            _number(row.slept_gpu_hours), _maybe(row.utilised_gpu_hours),
            _maybe(row.utilisation_coverage), *_unit_cells(row)]


def _unit_cells(row: UsageRow | ClusterUsageRow) -> list[str]:
    return [row.unit, neutralised(row.mig_profile), _number(row.approved_slice_hours),
            _number(row.allocated_slice_hours), _number(row.used_slice_hours)]


def _number(value: float) -> str:
    return f"{value:.6f}"


def _maybe(value: float | None) -> str:
    """An unknown figure is an empty cell, never 0."""
    return "" if value is None else _number(value)


def csv_chunks(rows: Iterable[UsageRow]) -> Iterator[str]:
    """The header, then the rows a chunk at a time: memory stays flat however long the range."""
    return _chunks(COLUMNS, map(_cells, rows))


def cluster_csv_chunks(rows: Iterable[ClusterUsageRow]) -> Iterator[str]:
    return _chunks(CLUSTER_COLUMNS, map(_cluster_cells, rows))


def _chunks(header: Iterable[str], lines: Iterable[list[str]]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(header)
    for n, cells in enumerate(lines, start=1):
        writer.writerow(cells)
        if n % _ROWS_PER_CHUNK == 0:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()
