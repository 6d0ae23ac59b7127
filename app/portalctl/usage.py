"""GPU-hours per tenant, class and period: a table, the API's report, or its CSV."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from app.portalctl.common import TenantArg, TenantOpt, api, either_tenant
from app.portalctl.output import Format, emit

# The unit of a row and a MIG row's slice-hours, after the GPU-hours.
UNIT_COLUMNS = ("unit", "mig_profile", "approved_slice_hours", "allocated_slice_hours",
                "used_slice_hours")
# A table's columns (the CSV's are the API's, new ones at their end): utilisation beside the
# GPU-hours in use it weighs.
ROW_COLUMNS = ("period", "tenant", "gpu_class", "approved_gpu_hours", "allocated_gpu_hours",
               "shared_pool_gpu_hours", "dedicated_gpu_hours", "used_gpu_hours",
               "guaranteed_gpu_hours", "burst_gpu_hours", "utilised_gpu_hours",
               "utilisation_coverage", "slept_gpu_hours", *UNIT_COLUMNS)


CLUSTER_COLUMNS = ("period", "tenant", "cluster", "gpu_class", "allocated_gpu_hours",
                   "used_gpu_hours", "guaranteed_gpu_hours", "burst_gpu_hours",
                   "utilised_gpu_hours", "utilisation_coverage", "slept_gpu_hours",
                   *UNIT_COLUMNS)


class By(StrEnum):
    tenant = "tenant"
    cluster = "cluster"


class UsageFormat(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"
    csv = "csv"


class GroupBy(StrEnum):
    day = "day"
    month = "month"


def usage(
    slug: TenantArg = None,
    tenant: TenantOpt = None,
    start: Annotated[str | None, typer.Option(
        "--from", help="start, inclusive (ISO 8601, UTC when no offset); default: 30 days "
                       "before --to")] = None,
    end: Annotated[str | None, typer.Option(
        "--to", help="end, exclusive; default: the end of today (UTC)")] = None,
    group_by: Annotated[GroupBy, typer.Option(help="one row per day or per month")
                        ] = GroupBy.day,
    by: Annotated[By, typer.Option(help="rows per tenant and class, or per cluster")
                  ] = By.tenant,
    output: Annotated[UsageFormat, typer.Option("--output", "-o",
                                                help="table, json, yaml or csv")
                      ] = UsageFormat.table,
) -> None:
    """GPU-hours of approved quota, clusters, dedicated nodes and pods (guaranteed and burst),
    of the clusters' guarantees freed by sleep (slept), and of the pods' GPUs weighted by their
    utilisation (utilised; "unknown" where Prometheus never said, and the share of the hours
    in use it covers), per period. A row per unit: whole GPUs (gpu), shares of one GPU
    (shared, counted in GPU-hours as the fractions they are) and MIG slices of a profile
    (mig, counted in slice-hours; their GPU-hours are 0).

    Without a tenant, every tenant you may see (all of them for platform admins).

    Example: portalctl usage acme --from 2026-11-01 --group-by month -o csv > acme.csv
    Per cluster, guaranteed and burst: portalctl usage acme --by cluster
    """
    params = {"tenant": either_tenant(slug, tenant), "from": start, "to": end,
              "group_by": group_by.value}
    path, columns = (("/api/v1/usage/clusters", CLUSTER_COLUMNS) if by is By.cluster
                     else ("/api/v1/usage", ROW_COLUMNS))
    with api() as client:
        if output is UsageFormat.csv:
            for chunk in client.download(f"{path}.csv", **params):
                typer.echo(chunk, nl=False)
            return
        report = client.get(path, **params)
    if output is UsageFormat.table:
        emit([_shown(row) for row in report["rows"]], Format.table, columns)
    else:
        emit(report, Format(output.value), columns)


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    """A table says "unknown" for utilised GPU-hours nothing was known of (never 0)."""
    if row.get("utilised_gpu_hours") is None:
        return {**row, "utilised_gpu_hours": "unknown"}
    return row
