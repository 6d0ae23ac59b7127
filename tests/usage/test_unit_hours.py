"""The ledger and the reports in units: a share's GPU-hours are its hundredths times seconds
divided once, a MIG grant's slice-hours are slices times hours, each a row of its own (tenant,
class, unit, profile) beside the whole-GPU row, whose figures stay as they were; the CSVs keep
their columns and add the unit and slice-hours at the end."""

from __future__ import annotations

import csv
import io
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
from app.quotas.models import TenantQuota
from app.usage import samples
from app.usage.models import LedgerEntry, UsageSample
from app.usage.sampling import record_usage
from tests import factories
from tests.support.tenancy import Tenancy, build_tenancy, headers
from tests.support.web import HTML
from tests.usage.support import LedgerClock, fix_clock, report
from tests.usage.test_utilised_hours import (
    NEW_COLUMNS,
    OLD_CLUSTER_COLUMNS,
    OLD_COLUMNS,
    UNIT_COLUMNS,
)

DAY = {"from": "2026-11-02T00:00:00Z", "to": "2026-11-03T00:00:00Z"}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


def _quota(db: Session, t: Tenancy, class_id: int, unit: str, amount: int,
           profile: str = "") -> None:
    db.add(TenantQuota(tenant_id=t.acme.id, gpu_class_id=class_id, unit=unit,
                       mig_profile=profile, amount=amount, gpus=amount if unit == "gpu" else 0))
    db.flush()


def _a_day_in_units(db: Session, clock: LedgerClock) -> Tenancy:
    """From midnight: acme holds quota of 8 whole H100s, 0.75 of an H100 and 3 x 1g.10gb of
    A100; clusters ``train`` (2 GPUs, 4 h), ``infer`` (0.5 of an H100 for 2 h, then 0.25 for
    2 h) and ``notes`` (3 x 1g.10gb for 3 h, then deleted). KAI bound 0.5 of a GPU to
    ``infer`` and 3 slices to ``notes`` from 01:00 for two hours (two samples an hour apart).
    The report is read at 04:00."""
    t = build_tenancy(db)
    a100 = factories.gpu_class(db, "NVIDIA-A100-SXM4-80GB", display_name="A100 SXM4 80GB")
    host = factories.env_host(db)
    _quota(db, t, t.h100.id, "gpu", 8)
    _quota(db, t, t.h100.id, "share", 75)
    _quota(db, t, a100.id, "mig", 3, "1g.10gb")
    factories.cluster(db, t.acme, host, "train", gpu_class_id=t.h100.id, gpus=2)
    infer = factories.cluster(db, t.acme, host, "infer", gpu_class_id=t.h100.id, unit="share",
                              amount=50, gpus=0)
    notes = factories.cluster(db, t.acme, host, "notes", gpu_class_id=a100.id, unit="mig",
                              mig_profile="1g.10gb", amount=3, gpus=0)
    for hour in (1, 2):
        clock.at(hours=hour)
        bound = HostUsage(queues=[
            QueueUse("acme", "infer", 0.5, 0.5, quota_gpus=0.5),
            QueueUse("acme", "notes", 0.0, 0.0, quota_gpus=3.0,
                     allocated_slices={"1g.10gb": 3.0}, requested_slices={"1g.10gb": 3.0})])
        record_usage(db, host.id, bound, int(clock.now.timestamp()), {}, holds_s=3600)
    clock.at(hours=2)
    infer.amount = 25
    db.flush()
    clock.at(hours=3)
    notes.deletion_requested_at = clock.now
    db.flush()
    clock.at(hours=4)
    db.commit()
    return t


def _rows(db: Session, t: Tenancy) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(r.gpu_class, r.unit, r.mig_profile): r.model_dump()
            for r in report(db, t.principal(t.platform_admin)).rows}


def test_the_ledger_keeps_each_units_amount(db: Session, clock: LedgerClock) -> None:
    _a_day_in_units(db, clock)
    held = db.execute(select(LedgerEntry.cluster_name, LedgerEntry.unit, LedgerEntry.mig_profile,
                             LedgerEntry.gpus, LedgerEntry.amount)
                      .where(LedgerEntry.kind == "cluster").order_by(LedgerEntry.id)).all()
    assert [tuple(row) for row in held] == [
        ("train", "gpu", "", 2, 2), ("infer", "share", "", 0, 50),
        ("notes", "mig", "1g.10gb", 0, 3), ("infer", "share", "", 0, 25),
        ("notes", "mig", "1g.10gb", 0, 0)]


def test_share_gpu_hours_and_slice_hours_are_exact_and_whole_gpus_unchanged(
    db: Session, clock: LedgerClock
) -> None:
    t = _a_day_in_units(db, clock)
    rows = _rows(db, t)
    whole, share = rows["NVIDIA-H100-80GB-HBM3", "gpu", ""], rows["NVIDIA-H100-80GB-HBM3",
                                                                   "shared", ""]
    mig = rows["NVIDIA-A100-SXM4-80GB", "mig", "1g.10gb"]
    assert len(rows) == 3
    # whole GPUs as before the units: 8 approved and 2 held for 4 hours, none sampled
    assert (whole["approved_gpu_hours"], whole["allocated_gpu_hours"],
            whole["allocated_gpu_seconds"], whole["used_gpu_hours"]) == (32.0, 8.0, 28800, 0.0)
    assert (whole["approved_slice_hours"], whole["allocated_slice_hours"]) == (0.0, 0.0)
    # 0.75 approved for 4 h; 0.5 held for 2 h and 0.25 for 2 h; 0.5 bound for 2 h
    assert (share["approved_gpu_hours"], share["allocated_gpu_hours"],
            share["shared_pool_gpu_hours"], share["allocated_gpu_seconds"],
            share["used_gpu_hours"], share["guaranteed_gpu_hours"],
            share["burst_gpu_hours"]) == (3.0, 1.5, 1.5, 5400, 1.0, 1.0, 0.0)
    assert share["used_slice_hours"] == 0.0
    # 3 slices approved for 4 h, held for 3 h, bound for 2 h; no GPU-hours at all
    assert (mig["approved_slice_hours"], mig["allocated_slice_hours"],
            mig["used_slice_hours"]) == (12.0, 9.0, 6.0)
    assert (mig["approved_gpu_hours"], mig["allocated_gpu_hours"], mig["used_gpu_hours"],
            mig["allocated_gpu_seconds"]) == (0.0, 0.0, 0.0, 0)


def test_folded_hours_keep_their_unit(db: Session, clock: LedgerClock) -> None:
    t = _a_day_in_units(db, clock)
    before = _rows(db, t)
    clock.at(days=2, hours=13)  # past the raw retention
    samples.fold_old_samples(db, int(clock.now.timestamp()))
    assert db.scalar(select(func.count()).select_from(UsageSample)) == 0
    after = _rows(db, t)
    assert {key: (row["used_gpu_hours"], row["used_slice_hours"]) for key, row in after.items()
            } == {key: (row["used_gpu_hours"], row["used_slice_hours"])
                  for key, row in before.items()}


def _csv(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_the_csvs_are_the_old_columns_then_the_units(client: TestClient, db: Session,
                                                     clock: LedgerClock) -> None:
    t = _a_day_in_units(db, clock)
    auth = headers(db, t.platform_admin)
    lines = _csv(client.get("/api/v1/usage.csv", params=DAY, headers=auth).text)
    assert tuple(lines[0]) == (*OLD_COLUMNS, *NEW_COLUMNS, *UNIT_COLUMNS)
    tail = {tuple(row[-5:-3]): row[-3:] for row in lines[1:]}
    assert tail == {("gpu", ""): ["0.000000"] * 3, ("shared", ""): ["0.000000"] * 3,
                    ("mig", "1g.10gb"): ["12.000000", "9.000000", "6.000000"]}
    used = OLD_COLUMNS.index("used_gpu_hours")
    assert {row[-5]: row[used] for row in lines[1:]} == {
        "gpu": "0.000000", "shared": "1.000000", "mig": "0.000000"}
    by_cluster = _csv(client.get("/api/v1/usage/clusters.csv", params=DAY, headers=auth).text)
    assert tuple(by_cluster[0]) == (*OLD_CLUSTER_COLUMNS, *NEW_COLUMNS, *UNIT_COLUMNS)
    cells = {row[4]: (row[6], row[-5], row[-4], *row[-3:]) for row in by_cluster[1:]}
    assert cells == {
        "train": ("8.000000", "gpu", "", "0.000000", "0.000000", "0.000000"),
        "infer": ("1.500000", "shared", "", "0.000000", "0.000000", "0.000000"),
        "notes": ("0.000000", "mig", "1g.10gb", "9.000000", "9.000000", "6.000000")}


def test_the_api_and_portalctl_say_the_unit(client: TestClient, db: Session,
                                            clock: LedgerClock,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    t = _a_day_in_units(db, clock)
    body: dict[str, Any] = client.get("/api/v1/usage/clusters", params=DAY,
                      headers=headers(db, t.platform_admin)).json()
    assert {r["cluster"]: (r["unit"], r["mig_profile"], r["used_slice_hours"],
                           r["used_gpu_hours"]) for r in body["rows"]} == {
        "train": ("gpu", "", 0.0, 0.0), "infer": ("shared", "", 0.0, 1.0),
        "notes": ("mig", "1g.10gb", 6.0, 0.0)}

    class _Api:
        def __enter__(self) -> _Api:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def get(self, path: str, **params: object) -> dict[str, Any]:
            return body

    monkeypatch.setattr(portalctl_usage, "api", lambda: _Api())
    shown = CliRunner().invoke(portalctl, ["usage", "--by", "cluster", "-o", "json"]).stdout
    assert '"used_slice_hours": 6.0' in shown
    assert db.scalar(select(VirtualCluster.amount).where(VirtualCluster.name == "infer")) == 25


def test_the_usage_page_says_each_clusters_grant_and_a_mig_rows_slice_hours(
    client: TestClient, db: Session, clock: LedgerClock
) -> None:
    t = _a_day_in_units(db, clock)
    notes = db.scalars(select(VirtualCluster).where(VirtualCluster.name == "notes")).one()
    notes.deletion_requested_at = None  # back, to be listed among the clusters now
    db.commit()
    page = client.get("/t/acme/usage", headers={**HTML, **headers(db, t.acme_viewer)}).text
    now = {name: re.search(rf'data-cluster="{name}".*?<td class="allocated"[^>]*>(.*?)</td>'
                           r'\s*<td class="in-use">(.*?)</td>', page, flags=re.S)
           for name in ("train", "infer", "notes")}
    assert {name: found.groups() if found else None for name, found in now.items()} == {
        "train": ("2", "not sampled yet"), "infer": ("0.25 of a GPU", "0.5"),
        "notes": ("3 \u00d7 1g.10gb", "3.0 slices")}
    totals = {unit: re.search(rf'class="class-total"[^>]*data-unit="{unit}".*?'
                              r'<td class="allocated"[^>]*>(.*?)</td>\s*<td class="in-use">(.*?)<',
                              page, flags=re.S) for unit in ("gpu", "share", "mig")}
    assert {unit: found.groups() if found else None for unit, found in totals.items()} == {
        "gpu": ("2 of 8 approved", "0.0"),  # its host was read: nothing bound
        "share": ("0.25 of 0.75 of a GPU approved", "0.5"),
        "mig": ("3 of 3 \u00d7 1g.10gb approved", "3.0 slices")}
    rows = page.split('id="usage-rows"')[1]
    mig_row = rows.split('data-gpu-class="NVIDIA-A100-SXM4-80GB"')[1].split("</tr>")[0]
    assert "1g.10gb slices" in mig_row
    assert "12.00 / 9.00 / 6.00" in mig_row
