"""Utilised GPU-hours in the usage report: samples with and without a utilisation figure, raw
and folded into hours, give the same hours and coverage; unknown is never 0; the CSVs keep
their old columns where readers find them and add the new ones at the end; the pages say
"unknown"."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from app.clusters.models import VirtualCluster
from app.kube.usage import HostUsage, QueueUse
from app.portalctl import usage as portalctl_usage
from app.portalctl.main import app as portalctl
from app.usage import samples, service
from app.usage.csv_export import CLUSTER_COLUMNS, COLUMNS
from app.usage.models import HourlyUsage, UsageSample
from app.usage.sampling import Utilised, record_usage
from app.usage.schemas import UsageFilters
from tests.support.tenancy import Tenancy, build_tenancy, headers
from tests.support.web import HTML
from tests.usage.support import (
    LedgerClock,
    approve_quota,
    create_cluster,
    fix_clock,
    report,
)

DAYS = {"from": "2026-11-02T00:00:00Z", "to": "2026-11-04T00:00:00Z"}
# The columns readers had before utilisation, in their order (app/lab/demo.py reads column 8).
OLD_COLUMNS = ("period", "period_start", "period_end", "tenant", "gpu_class",
               "approved_gpu_hours", "allocated_gpu_hours", "dedicated_gpu_hours",
               "used_gpu_hours", "allocated_gpu_seconds", "guaranteed_gpu_hours",
               "burst_gpu_hours", "slept_gpu_hours", "shared_pool_gpu_hours")
OLD_CLUSTER_COLUMNS = ("period", "period_start", "period_end", "tenant", "cluster", "gpu_class",
                       "allocated_gpu_hours", "used_gpu_hours", "guaranteed_gpu_hours",
                       "burst_gpu_hours", "slept_gpu_hours")
NEW_COLUMNS = ("utilised_gpu_hours", "utilisation_coverage")
# After them, the units of issue 61 (tests/usage/test_unit_hours.py).
UNIT_COLUMNS = ("unit", "mig_profile", "approved_slice_hours", "allocated_slice_hours",
                "used_slice_hours")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


# At half-hour passes from 10:00 (each sample stands 30 minutes), acme's ``train`` has 4 GPUs
# bound, then 2: half computing at 10:00, unknown at 10:30 (Prometheus down), 1.5 of 2 at
# 11:00, unknown at 11:30 (Prometheus shows 1 of its 2 GPUs). globex's ``rival`` has 1 GPU
# bound throughout and Prometheus never shows it.
PASSES: tuple[tuple[int, float, Utilised | None], ...] = (
    (0, 4.0, {("acme", "train"): (2.0, 4)}),
    (30, 4.0, None),
    (60, 2.0, {("acme", "train"): (1.5, 2)}),
    (90, 2.0, {("acme", "train"): (0.9, 1)}),
)
USED_HOURS = (4 + 4 + 2 + 2) / 2
UTILISED_HOURS = (2.0 + 1.5) / 2
COVERAGE = (4 + 2) / (4 + 4 + 2 + 2)


def _sampled_morning(db: Session, clock: LedgerClock) -> Tenancy:
    t = build_tenancy(db)
    approve_quota(db, t, 8)
    approve_quota(db, t, 2, slug="globex", requester=t.principal(t.globex_admin))
    create_cluster(db, t, "train", 4)
    create_cluster(db, t, "rival", 1, slug="globex", principal=t.principal(t.globex_admin))
    host = db.scalar(select(VirtualCluster.host_cluster_id).where(VirtualCluster.name == "train"))
    assert host is not None
    for minute, bound, utilised in PASSES:
        clock.at(hours=10, minutes=minute)
        usage = HostUsage(queues=[QueueUse("acme", "train", bound, 4.0),
                                  QueueUse("globex", "rival", 1.0, 1.0)])
        record_usage(db, host, usage, int(clock.now.timestamp()), {}, holds_s=1800,
                     utilised=utilised)
    db.commit()
    return t


def _figures(db: Session, t: Tenancy, days: int = 1) -> dict[tuple[str, str], tuple[object, ...]]:
    rows = report(db, t.principal(t.platform_admin), days=days).rows
    return {(r.period, r.tenant): (r.used_gpu_hours, r.utilised_gpu_hours,
                                   r.utilisation_coverage) for r in rows}


def test_utilised_hours_and_coverage_are_exact_raw_and_after_the_hours_are_folded(
    db: Session, clock: LedgerClock
) -> None:
    t = _sampled_morning(db, clock)
    clock.at(hours=12)
    expected = {("2026-11-02", "acme"): (USED_HOURS, UTILISED_HOURS, COVERAGE),
                # in use all morning, its utilisation never known: unknown, not 0
                ("2026-11-02", "globex"): (2.0, None, 0.0)}
    assert _figures(db, t) == expected

    clock.at(days=2, hours=13)  # past the raw retention: 10:00 and 11:00 are folded
    samples.fold_old_samples(db, int(clock.now.timestamp()))
    assert db.scalar(select(func.count()).select_from(UsageSample)) == 0
    hours = db.execute(select(HourlyUsage.hour_s % 86400 // 3600, HourlyUsage.used_gpu_seconds,
                              HourlyUsage.utilised_gpu_seconds,
                              HourlyUsage.utilisation_known_seconds)
                       .where(HourlyUsage.source == "queue", HourlyUsage.tenant_id == t.acme.id)
                       .order_by(HourlyUsage.hour_s)).all()
    assert [tuple(h) for h in hours] == [(10, 8 * 1800, 2.0 * 1800, 4 * 1800),
                                         (11, 4 * 1800, 1.5 * 1800, 2 * 1800)]
    after = _figures(db, t, days=3)
    assert {key: after[key] for key in expected} == expected
    # the days after: the clusters still held, no GPU in use: nothing computed, no coverage
    assert after[("2026-11-03", "acme")] == (0.0, 0.0, None)


def test_the_cluster_report_gives_each_clusters_utilised_hours(
    db: Session, clock: LedgerClock
) -> None:
    t = _sampled_morning(db, clock)
    clock.at(hours=12)
    filters = UsageFilters.model_validate({"start": "2026-11-02T00:00:00Z",
                                           "end": "2026-11-03T00:00:00Z"})
    rows = service.cluster_report(db, t.principal(t.platform_admin), filters).rows
    assert {r.cluster: (r.used_gpu_hours, r.utilised_gpu_hours, r.utilisation_coverage)
            for r in rows} == {"train": (USED_HOURS, UTILISED_HOURS, COVERAGE),
                               "rival": (2.0, None, 0.0)}


def _csv(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


@pytest.mark.parametrize(("path", "old", "key"), [
    ("/api/v1/usage.csv", OLD_COLUMNS, 3), ("/api/v1/usage/clusters.csv", OLD_CLUSTER_COLUMNS, 4)])
def test_the_csvs_keep_their_old_columns_in_order_and_add_utilisation_at_the_end(
    client: TestClient, db: Session, clock: LedgerClock, path: str, old: tuple[str, ...],
    key: int
) -> None:
    t = _sampled_morning(db, clock)
    clock.at(hours=12)
    lines = _csv(client.get(path, params=DAYS, headers=headers(db, t.platform_admin)).text)
    assert tuple(lines[0]) == (*old, *NEW_COLUMNS, *UNIT_COLUMNS)
    assert (COLUMNS if path == "/api/v1/usage.csv" else CLUSTER_COLUMNS) == tuple(lines[0])
    cells = {row[key]: row[len(old):len(old) + len(NEW_COLUMNS)]
             for row in lines[1:] if row[0] == "2026-11-02"}
    names = ("acme", "globex") if key == 3 else ("train", "rival")
    assert cells == {names[0]: [f"{UTILISED_HOURS:.6f}", f"{COVERAGE:.6f}"],
                     names[1]: ["", "0.000000"]}  # unknown: an empty cell, never 0
    used = old.index("used_gpu_hours")
    assert {row[key]: row[used] for row in lines[1:] if row[0] == "2026-11-02"} == {
        names[0]: f"{USED_HOURS:.6f}", names[1]: "2.000000"}


def test_the_api_says_null_where_nothing_was_known(client: TestClient, db: Session,
                                                   clock: LedgerClock) -> None:
    t = _sampled_morning(db, clock)
    clock.at(hours=12)
    body = client.get("/api/v1/usage", params=DAYS, headers=headers(db, t.platform_admin)).json()
    shown = {(r["period"], r["tenant"]): (r["utilised_gpu_hours"], r["utilisation_coverage"])
             for r in body["rows"]}
    assert shown[("2026-11-02", "acme")] == (UTILISED_HOURS, COVERAGE)
    assert shown[("2026-11-02", "globex")] == (None, 0.0)
    assert json.dumps(body).count('"utilised_gpu_hours": null') == 1


def _utilised_cell(page: str, period: str) -> str:
    found = re.search(rf'data-period="{period}".*?<td class="utilised"[^>]*>(.*?)</td>', page,
                      flags=re.S)
    assert found is not None
    return re.sub(r"<[^>]+>", "", found.group(1)).strip()


def test_the_usage_pages_show_utilised_hours_and_unknown_as_a_word(
    client: TestClient, db: Session, clock: LedgerClock
) -> None:
    t = _sampled_morning(db, clock)
    clock.at(hours=12)
    acme = client.get("/t/acme/usage", params=DAYS,
                      headers={**HTML, **headers(db, t.acme_viewer)}).text
    assert "<th>Utilised</th>" in acme
    assert _utilised_cell(acme, "2026-11-02") == "1.75 (50 % known)"
    globex = client.get("/t/globex/usage", params=DAYS,
                        headers={**HTML, **headers(db, t.globex_admin)}).text
    assert _utilised_cell(globex, "2026-11-02") == "unknown"
    admin = client.get("/admin/usage", params=DAYS,
                       headers={**HTML, **headers(db, t.platform_admin)}).text
    cells = [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(
        r'<td class="utilised"[^>]*>(.*?)</td>', admin.split('id="usage-rows"')[1], flags=re.S)]
    assert "1.75 (50 % known)" in cells and "unknown" in cells


class _Api:
    """portalctl's API client, answering with one report."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def __enter__(self) -> _Api:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def get(self, path: str, **params: object) -> dict[str, Any]:
        return self.body


def test_portalctl_usage_shows_utilised_hours_and_says_unknown(
    db: Session, clock: LedgerClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _sampled_morning(db, clock)
    clock.at(hours=12)
    body = report(db, t.principal(t.platform_admin)).model_dump(mode="json")
    monkeypatch.setattr(portalctl_usage, "api", lambda: _Api(body))
    table = CliRunner().invoke(portalctl, ["usage"]).stdout.splitlines()
    header = table[0].split()
    at = header.index("UTILISED_GPU_HOURS")
    assert header[at:at + 3] == ["UTILISED_GPU_HOURS", "UTILISATION_COVERAGE", "SLEPT_GPU_HOURS"]
    shown = {line.split()[1]: line.split()[at:at + 2] for line in table[1:]}
    assert shown == {"acme": [str(UTILISED_HOURS), str(COVERAGE)], "globex": ["unknown", "0.0"]}


def _computing_cell(page: str, cluster: str) -> str:
    found = re.search(rf'data-cluster="{cluster}".*?<td class="computing">(.*?)</td>', page,
                      flags=re.S)
    assert found is not None
    return found.group(1).strip()


def test_the_now_table_shows_how_much_of_in_use_computed_at_the_last_sample(
    client: TestClient, db: Session, clock: LedgerClock
) -> None:
    t = _sampled_morning(db, clock)  # its last pass, 11:30, did not know
    viewer = {**HTML, **headers(db, t.acme_viewer)}
    assert _computing_cell(client.get("/t/acme/usage", headers=viewer).text,
                           "train") == "unknown"
    host = db.scalar(select(VirtualCluster.host_cluster_id).where(VirtualCluster.name == "train"))
    assert host is not None
    clock.at(hours=12)
    record_usage(db, host, HostUsage(queues=[QueueUse("acme", "train", 2.0, 4.0)]),
                 int(clock.now.timestamp()), {}, utilised={("acme", "train"): (1.5, 2)})
    db.commit()
    assert _computing_cell(client.get("/t/acme/usage", headers=viewer).text,
                           "train") == "1.50 (75 %)"
