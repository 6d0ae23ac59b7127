"""GPU-hours freed by sleep over the fleet, per class and day (today and the seven days
before by default), in the API and the page: the usage report's figures summed over tenants;
tenants see none of it."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests.support.tenancy import Tenancy, build_tenancy, headers
from tests.support.web import HTML
from tests.usage.support import (
    LedgerClock,
    approve_quota,
    create_cluster,
    fall_asleep,
    fix_clock,
    wake,
)

URL = "/api/v1/fleet/sleep"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


def _two_naps(db: Session, clock: LedgerClock) -> Tenancy:
    """acme's ``train`` (4 H100s) asleep 10:00 to 13:00 on 2026-11-02, ``serve`` (2 H100s)
    asleep since 09:00 on 2026-11-04, and now 15:00 that day."""
    t = build_tenancy(db)
    approve_quota(db, t, 8)
    create_cluster(db, t, "train", 4)
    create_cluster(db, t, "serve", 2)
    fall_asleep(db, t, clock, "train", hours=10)
    wake(db, t, clock, "train", hours=13)
    fall_asleep(db, t, clock, "serve", days=2, hours=9)
    clock.at(days=2, hours=15)
    db.commit()
    return t


def test_gpu_hours_freed_by_sleep_per_class_today_and_the_week_before(
        client: TestClient, db: Session, clock: LedgerClock) -> None:
    t = _two_naps(db, clock)
    found = client.get(URL, headers=headers(db, t.platform_admin)).json()
    assert found["days"][0] == "2026-10-28" and found["days"][-1] == "2026-11-04"
    h100 = next(c for c in found["classes"] if c["gpu_class"] == t.h100.product)
    assert {d["day"]: d["slept_gpu_hours"] for d in h100["days"] if d["slept_gpu_hours"]} == {
        "2026-11-02": 12.0, "2026-11-04": 12.0}
    assert (h100["today_gpu_hours"], h100["total_gpu_hours"]) == (12.0, 24.0)
    others = [c["total_gpu_hours"] for c in found["classes"] if c is not h100]
    assert set(others) <= {0.0}
    two = client.get(URL, params={"days": 2}, headers=headers(db, t.platform_admin)).json()
    assert two["days"] == ["2026-11-03", "2026-11-04"]
    assert client.get(URL, params={"days": 0},
                      headers=headers(db, t.platform_admin)).status_code == 422


def test_the_fleet_and_the_usage_report_agree(client: TestClient, db: Session,
                                              clock: LedgerClock) -> None:
    t = _two_naps(db, clock)
    admin = headers(db, t.platform_admin)
    fleet = client.get(URL, params={"days": 3}, headers=admin).json()
    usage = client.get("/api/v1/usage", params={"from": fleet["start"], "to": fleet["end"]},
                       headers=admin).json()
    h100 = next(c for c in fleet["classes"] if c["gpu_class"] == t.h100.product)
    assert sum(r["slept_gpu_hours"] for r in usage["rows"]) == h100["total_gpu_hours"] == 24.0


def test_tenants_may_not_see_the_fleets_sleep(client: TestClient, db: Session,
                                              clock: LedgerClock) -> None:
    t = _two_naps(db, clock)
    assert client.get(URL, headers=headers(db, t.acme_admin)).status_code == 403
    page = client.get("/admin/fleet/sleep", headers={**HTML, **headers(db, t.acme_admin)})
    assert page.status_code == 403


def test_the_page_charts_and_lists_gpu_hours_freed_by_sleep(
        client: TestClient, db: Session, clock: LedgerClock) -> None:
    t = _two_naps(db, clock)
    page = client.get("/admin/fleet/sleep", params={"days": 3},
                      headers={**HTML, **headers(db, t.platform_admin)}).text
    chart = page.split('id="sleep-chart"')[1].split("</figure>")[0]
    assert "freed by sleep" in chart
    bars = re.findall(rf'data-series="{re.escape(t.h100.display_name)}" '
                      r'data-category="([\d-]+)" data-value="([\d.]+)"', chart)
    assert bars == [("2026-11-02", "12.0"), ("2026-11-04", "12.0")]  # no bar for nothing
    row = page.split(f'data-gpu-class="{t.h100.product}"')[1].split("</tr>")[0]
    assert re.findall(r'data-day="([\d-]+)" data-value="([\d.]+)"', row) == [
        ("2026-11-02", "12.0"), ("2026-11-03", "0.0"), ("2026-11-04", "12.0")]
    assert 'class="today" data-value="12.0"' in row and 'class="total" data-value="24.0"' in row
    hosts = client.get("/admin/fleet/hosts", headers={**HTML, **headers(db, t.platform_admin)})
    assert 'href="/admin/fleet/sleep"' in hosts.text
