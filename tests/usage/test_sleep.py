"""GPU-hours freed by sleep: the ledger's ``sleep`` series, from when the worker has a cluster
asleep until it wakes or is deleted, in the report's JSON and CSV, per cluster, and the pages."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.clusters import repository as cluster_rows
from app.usage.csv_export import CLUSTER_COLUMNS, COLUMNS
from tests.support.tenancy import Tenancy, build_tenancy, headers
from tests.support.web import HTML
from tests.usage.support import (
    T0,
    LedgerClock,
    approve_quota,
    cluster_named,
    create_cluster,
    delete_cluster,
    entries,
    fall_asleep,
    fix_clock,
    report,
    wake,
)

DAY = {"from": "2026-11-02T00:00:00Z", "to": "2026-11-03T00:00:00Z"}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


def _acme_asleep_from_ten_to_one(db: Session, clock: LedgerClock) -> Tenancy:
    """acme's 4-GPU shared-pool ``train``, made at midnight, asleep from 10:00 to 13:00."""
    t = build_tenancy(db)
    approve_quota(db, t, 8)
    create_cluster(db, t, "train", 4)
    fall_asleep(db, t, clock, "train", hours=10)
    wake(db, t, clock, "train", hours=13)
    clock.at(hours=20)
    db.commit()
    return t


def test_the_ledger_records_sleep_beside_the_allocation(db: Session, clock: LedgerClock) -> None:
    _acme_asleep_from_ten_to_one(db, clock)
    assert entries(db, "sleep") == [("sleep", "train", 4, T0 + timedelta(hours=10)),
                                    ("sleep", "train", 0, T0 + timedelta(hours=13))]
    assert entries(db, "cluster") == [("cluster", "train", 4, T0)]  # still held while asleep


def test_a_cluster_asleep_from_ten_to_one_with_four_gpus_frees_twelve_gpu_hours(
        db: Session, clock: LedgerClock) -> None:
    t = _acme_asleep_from_ten_to_one(db, clock)
    [row] = report(db, t.principal(t.acme_viewer), tenant="acme").rows
    assert (row.slept_gpu_hours, row.allocated_gpu_hours) == (12.0, 80.0)


def test_json_csv_and_per_cluster_give_the_slept_gpu_hours(
        client: TestClient, db: Session, clock: LedgerClock) -> None:
    t = _acme_asleep_from_ten_to_one(db, clock)
    viewer = headers(db, t.acme_viewer)
    [row] = client.get("/api/v1/usage", params=DAY, headers=viewer).json()["rows"]
    assert row["slept_gpu_hours"] == 12.0
    assert COLUMNS[12] == "slept_gpu_hours" and COLUMNS[8] == "used_gpu_hours"
    lines = list(csv.reader(io.StringIO(client.get("/api/v1/usage.csv", params=DAY,
                                                   headers=viewer).text)))
    assert (lines[0][12], lines[1][12], lines[1][6]) == ("slept_gpu_hours", "12.000000",
                                                         "80.000000")
    assert (lines[0][13], lines[1][13]) == ("shared_pool_gpu_hours", "80.000000")
    [mine] = client.get("/api/v1/usage/clusters", params=DAY, headers=viewer).json()["rows"]
    assert (mine["cluster"], mine["allocated_gpu_hours"], mine["slept_gpu_hours"]) == (
        "train", 80.0, 12.0)
    per_cluster = list(csv.reader(io.StringIO(client.get(
        "/api/v1/usage/clusters.csv", params=DAY, headers=viewer).text)))
    assert CLUSTER_COLUMNS[10] == "slept_gpu_hours"  # where it was, utilisation after it
    assert (per_cluster[0][10], per_cluster[1][4], per_cluster[1][10]) == (
        "slept_gpu_hours", "train", "12.000000")


def test_the_schema_says_what_slept_gpu_hours_are(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for schema in ("UsageRow", "ClusterUsageRow"):
        assert "freed by sleep" in schemas[schema]["properties"]["slept_gpu_hours"][
            "description"]


def test_a_cluster_deleted_while_asleep_stops_counting_at_its_deletion_request(
        db: Session, clock: LedgerClock) -> None:
    t = build_tenancy(db)
    approve_quota(db, t, 8)
    cluster_id = create_cluster(db, t, "train", 4)
    fall_asleep(db, t, clock, "train", hours=10)
    clock.at(hours=11, minutes=30)
    delete_cluster(db, t, "train")
    clock.at(hours=12)
    cluster_rows.delete_cluster_row(db, cluster_id)  # torn down, the row goes
    clock.at(hours=20)
    assert [e[2:] for e in entries(db, "sleep")] == [(4, T0 + timedelta(hours=10)),
                                                     (0, T0 + timedelta(hours=11, minutes=30))]
    [row] = report(db, t.principal(t.platform_admin)).rows
    assert (row.slept_gpu_hours, row.allocated_gpu_hours) == (6.0, 46.0)


def test_asleep_until_now_counts_up_to_now_and_over_midnight(
        db: Session, clock: LedgerClock) -> None:
    t = build_tenancy(db)
    approve_quota(db, t, 8)
    create_cluster(db, t, "train", 4)
    fall_asleep(db, t, clock, "train", hours=22)
    clock.at(days=1, hours=1, minutes=30)
    rows = report(db, t.principal(t.platform_admin), days=2).rows
    assert [(r.period, r.slept_gpu_hours) for r in rows] == [("2026-11-02", 8.0),
                                                             ("2026-11-03", 6.0)]


def test_a_dedicated_nodes_cluster_asleep_frees_nothing(db: Session, clock: LedgerClock) -> None:
    """Its nodes stay the tenant's, asleep or not: nothing goes back to the pool."""
    t = build_tenancy(db)
    approve_quota(db, t, 8)
    create_cluster(db, t, "train", 4)
    dedicated = cluster_named(db, "train")
    dedicated.placement = "dedicated-nodes"  # as if made so: placement never changes
    clock.at(hours=1)
    dedicated.asleep_since = clock.now
    dedicated.gpus = 3  # a change the allocation records
    db.flush()
    clock.at(hours=2)
    assert entries(db, "sleep") == []
    assert [e[2] for e in entries(db, "cluster")] == [4, 3]
    assert report(db, t.principal(t.platform_admin)).rows[0].slept_gpu_hours == 0.0


def test_the_tenants_page_charts_and_lists_gpu_hours_freed_by_sleep(
        client: TestClient, db: Session, clock: LedgerClock) -> None:
    t = _acme_asleep_from_ten_to_one(db, clock)
    page = client.get("/t/acme/usage", params=DAY,
                      headers={**HTML, **headers(db, t.acme_viewer)}).text
    chart = page.split('id="slept-chart"')[1].split("</figure>")[0]
    assert "freed by sleep" in chart
    assert re.findall(r'data-category="([\d-]+)" data-value="([\d.]+)"', chart) == [
        ("2026-11-02", "12.0")]
    assert re.search(r'data-period="2026-11-02".*?class="slept" data-value="12.0"', page,
                     flags=re.S)
    admin = client.get("/admin/usage", params=DAY,
                       headers={**HTML, **headers(db, t.platform_admin)}).text
    assert re.search(r'data-tenant="acme".*?class="slept" data-value="12.0"', admin, flags=re.S)

