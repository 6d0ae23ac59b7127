"""`portalctl usage` against the real app: the API's report as a table, JSON, YAML or CSV."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy import select
from typer.testing import CliRunner

from app.portalctl.main import app
from app.tenants.models import Tenant
from app.usage.models import LedgerEntry
from tests.portalctl.conftest import Portal, PortalCtl, Result

RANGE = ("--from", "2025-01-01", "--to", "2025-01-05")
QUERY = {"tenant": "acme", "from": "2025-01-01", "to": "2025-01-05"}


def test_usage_is_the_apis_report_in_every_format(portal: Portal, portalctl: PortalCtl) -> None:
    _four_gpus_for_a_day_and_a_half(portal)
    portalctl.login(portal, "acme-admin")

    report = _json(portalctl("usage", "--tenant", "acme", *RANGE, "-o", "json"))
    assert report == _api(portal, "/api/v1/usage", QUERY).json()
    assert [(r["period"], r["allocated_gpu_hours"]) for r in report["rows"]] == [
        ("2025-01-01", 96.0), ("2025-01-02", 48.0)]
    # The runner's bytes: its text view would turn the CSV's \r\n into \n.
    csv = CliRunner().invoke(app, ["usage", "--tenant", "acme", *RANGE, "-o", "csv"],
                             env=portalctl.env)
    assert csv.exit_code == 0, csv.stderr
    assert csv.stdout_bytes == _api(portal, "/api/v1/usage.csv", QUERY).content
    assert csv.stdout_bytes.startswith(b"period,period_start,")
    assert csv.stdout_bytes.count(b"\r\n") == 3

    monthly = _json(portalctl("usage", "--tenant", "acme", *RANGE, "--group-by", "month",
                              "-o", "yaml"), parse=False)
    assert "period: 2025-01" in monthly and "allocated_gpu_hours: 144.0" in monthly
    table = portalctl("usage", "--tenant", "acme", *RANGE).stdout.splitlines()
    assert table[0].split()[:3] == ["PERIOD", "TENANT", "GPU_CLASS"] and len(table) == 3
    assert table[1].split()[:2] == ["2025-01-01", "acme"]


def test_bad_or_forbidden_usage_queries_fail_with_their_exit_code(
    portal: Portal, portalctl: PortalCtl
) -> None:
    portalctl.login(portal, "globex-admin")
    someone_elses = portalctl("usage", "--tenant", "acme", *RANGE, "-o", "csv")
    # Another tenant's usage reads as no such tenant: its existence is not given away.
    assert someone_elses.exit_code == 3 and someone_elses.stdout == ""
    assert "no tenant 'acme'" in someone_elses.stderr
    backwards = portalctl("usage", "--from", "2025-02-01", "--to", "2025-01-01")
    assert backwards.exit_code == 1 and backwards.stderr.startswith("error: ")
    assert portalctl("usage", "--group-by", "week").exit_code == 2


def _four_gpus_for_a_day_and_a_half(portal: Portal) -> None:
    start, end = datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 1, 2, 12, tzinfo=UTC)
    with portal.database.transaction() as db:
        acme = db.scalars(select(Tenant.id).where(Tenant.slug == "acme")).one()
        for at, gpus in ((start, 4), (end, 0)):
            db.add(LedgerEntry(at=at, at_s=int(at.timestamp()), kind="cluster", subject_id=9999,
                               tenant_id=acme, gpu_class_id=portal.h100_id,
                               cluster_name="old-train", gpus=gpus))


def _api(portal: Portal, path: str, params: dict[str, str]) -> httpx.Response:
    response = httpx.get(f"{portal.url}{path}", params=params,
                         headers={"Authorization": f"Bearer {portal.tokens['acme-admin']}"})
    response.raise_for_status()
    return response


def _json(result: Result, *, parse: bool = True) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout) if parse else result.stdout


def test_usage_gives_the_gpu_hours_freed_by_sleep_per_tenant_and_per_cluster(
        portal: Portal, portalctl: PortalCtl) -> None:
    """old-train held 4 GPUs for a day and a half, asleep 10:00 to 13:00 on the first day."""
    _four_gpus_for_a_day_and_a_half(portal)
    with portal.database.transaction() as db:
        acme = db.scalars(select(Tenant.id).where(Tenant.slug == "acme")).one()
        for at, gpus in ((datetime(2025, 1, 1, 10, tzinfo=UTC), 4),
                         (datetime(2025, 1, 1, 13, tzinfo=UTC), 0)):
            db.add(LedgerEntry(at=at, at_s=int(at.timestamp()), kind="sleep", subject_id=9999,
                               tenant_id=acme, gpu_class_id=portal.h100_id, cluster_id=9999,
                               cluster_name="old-train", gpus=gpus))
    portalctl.login(portal, "acme-admin")
    report = _json(portalctl("usage", "--tenant", "acme", *RANGE, "-o", "json"))
    assert [(r["period"], r["slept_gpu_hours"]) for r in report["rows"]] == [
        ("2025-01-01", 12.0), ("2025-01-02", 0.0)]
    table = portalctl("usage", "--tenant", "acme", *RANGE).stdout.splitlines()
    assert _column(table, "SLEPT_GPU_HOURS")[0] == "12.0"
    clusters = portalctl("usage", "--by", "cluster", "--tenant", "acme", *RANGE)
    assert clusters.exit_code == 0, clusters.stderr
    lines = clusters.stdout.splitlines()
    assert lines[1].split()[2] == "old-train" and _column(lines, "SLEPT_GPU_HOURS")[0] == "12.0"


def _column(table: list[str], name: str) -> list[str]:
    """A column of a printed table, its rows' cells as printed (cells are aligned under the
    header)."""
    start = table[0].index(name)
    return [row[start:].split()[0] if row[start:].strip() else "" for row in table[1:]]
