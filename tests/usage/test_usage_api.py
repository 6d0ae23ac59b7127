"""GET /api/v1/usage and /api/v1/usage.csv: the same rows, validated filters, tenant isolation."""

from __future__ import annotations

import csv
import io
import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.usage.csv_export import COLUMNS
from tests import factories
from tests.support.tenancy import Tenancy, build_tenancy, headers
from tests.usage.support import LedgerClock, approve_quota, create_cluster, fix_clock

DAY = {"from": "2026-11-02T00:00:00Z", "to": "2026-11-04T00:00:00Z"}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


def _two_tenants(db: Session, clock: LedgerClock) -> Tenancy:
    t = build_tenancy(db)
    approve_quota(db, t, 8)
    approve_quota(db, t, 2, slug="globex", requester=t.principal(t.globex_admin))
    clock.at(hours=6)
    create_cluster(db, t, "train", 3)
    clock.at(hours=30)
    return t


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_json_and_csv_give_the_same_rows(client: TestClient, db: Session,
                                         clock: LedgerClock) -> None:
    t = _two_tenants(db, clock)
    admin = headers(db, t.platform_admin)
    body = client.get("/api/v1/usage", params=DAY, headers=admin).json()
    download = client.get("/api/v1/usage.csv", params=DAY, headers=admin)
    assert download.status_code == 200
    assert download.headers["content-type"].startswith("text/csv")
    assert download.headers["content-disposition"] == (
        'attachment; filename="gpu-usage-20261102-20261104.csv"')
    assert download.text.splitlines()[0] == ",".join(COLUMNS)
    rows = _csv(download.text)
    assert [(r["period"], r["tenant"]) for r in rows] == [
        ("2026-11-02", "acme"), ("2026-11-02", "globex"),
        ("2026-11-03", "acme"), ("2026-11-03", "globex")]
    assert [(r["period"], r["tenant"]) for r in body["rows"]] == [
        (r["period"], r["tenant"]) for r in rows]
    for column in ("approved_gpu_hours", "allocated_gpu_hours", "used_gpu_hours"):
        assert [float(r[column]) for r in rows] == [r[column] for r in body["rows"]]
    acme = [r for r in body["rows"] if r["tenant"] == "acme"]
    assert [r["allocated_gpu_hours"] for r in acme] == [3 * 18, 3 * 6]
    assert [r["approved_gpu_hours"] for r in acme] == [8 * 24, 8 * 6]


def test_month_rows_sum_the_day_rows(client: TestClient, db: Session,
                                     clock: LedgerClock) -> None:
    t = _two_tenants(db, clock)
    admin = headers(db, t.platform_admin)
    days = client.get("/api/v1/usage", params=DAY, headers=admin).json()["rows"]
    months = client.get("/api/v1/usage", params={**DAY, "group_by": "month"},
                        headers=admin).json()["rows"]
    assert [(m["period"], m["tenant"], m["allocated_gpu_seconds"]) for m in months] == [
        ("2026-11", tenant, sum(d["allocated_gpu_seconds"] for d in days
                                if d["tenant"] == tenant)) for tenant in ("acme", "globex")]


def test_cells_that_a_spreadsheet_would_run_are_neutralised(
    client: TestClient, db: Session, clock: LedgerClock
) -> None:
    tenant = factories.tenant(db, "acme")
    admin = factories.user(db, admin=True)
    for product in ("=HYPERLINK(\"http://evil\")", "+1", "-2", "@SUM(A1)", "\tx", "\rx", "ok"):
        factories.quota(db, tenant, factories.gpu_class(db, product=product), 1)
    clock.at(hours=1)
    text = client.get("/api/v1/usage.csv", params=DAY, headers=headers(db, admin)).text
    classes = sorted(r["gpu_class"] for r in _csv(text))
    assert classes == sorted(["'=HYPERLINK(\"http://evil\")", "'+1", "'-2", "'@SUM(A1)",
                              "'\tx", "'\rx", "ok"])


@pytest.mark.parametrize(("params", "field"), [
    ({"from": "2026-11-03T00:00:00Z", "to": "2026-11-02T00:00:00Z"}, "from"),
    ({"from": "2026-11-02T00:00:00Z", "to": "2026-11-02T00:00:00Z"}, "from"),
    ({"from": "2025-01-01T00:00:00Z", "to": "2026-11-02T00:00:00Z"}, "to"),
])
@pytest.mark.parametrize("path", ["/api/v1/usage", "/api/v1/usage.csv", "/api/v1/usage/clusters",
                                  "/api/v1/usage/clusters.csv"])
def test_bad_ranges_are_422_with_the_field(client: TestClient, db: Session, path: str,
                                           params: dict[str, str], field: str) -> None:
    admin = factories.user(db, admin=True)
    answer = client.get(path, params=params, headers=headers(db, admin))
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert [e["field"] for e in answer.json()["errors"]] == [field]


@pytest.mark.parametrize(("params", "field"), [
    ({"from": "0001-01-01T00:00:00+01:00"}, "from"),  # an offset takes it before year 1
    ({"to": "9999-12-31T23:59:59-01:00"}, "to"),  # past year 9999
    ({"to": "0001-01-05T00:00:00Z"}, "to"),  # the default 30 days before it are not dates
    ({"from": "9999-12-30T00:00:00Z", "to": "9999-12-31T23:59:59Z"}, "to"),  # nor the next day
])
@pytest.mark.parametrize("path", ["/api/v1/usage", "/api/v1/usage.csv", "/api/v1/usage/clusters",
                                  "/api/v1/usage/clusters.csv"])
def test_bounds_at_the_calendars_edge_are_422_with_the_field(
    client: TestClient, db: Session, path: str, params: dict[str, str], field: str
) -> None:
    admin = factories.user(db, admin=True)
    answer = client.get(path, params=params, headers=headers(db, admin))
    assert answer.status_code == 422, answer.text
    assert [e["field"] for e in answer.json()["errors"]] == [field]


@pytest.mark.parametrize("params", [
    {"from": "1970-01-01T00:00:00Z", "to": "1970-01-03T00:00:00Z"},
    {"from": "9998-09-15T00:00:00Z", "to": "9999-01-01T00:00:00Z", "group_by": "month"},
])
@pytest.mark.parametrize("path", ["/api/v1/usage", "/api/v1/usage/clusters"])
def test_reports_up_to_the_calendars_edge_have_no_rows(
    client: TestClient, db: Session, path: str, params: dict[str, str]
) -> None:
    admin = factories.user(db, admin=True)
    answer = client.get(path, params=params, headers=headers(db, admin))
    assert answer.status_code == 200, answer.text
    assert answer.json()["rows"] == []


@pytest.mark.parametrize("params", [{"from": "yesterday"}, {"group_by": "week"},
                                    {"tenant": "x" * 31}])
def test_unreadable_filters_are_422(client: TestClient, db: Session,
                                    params: dict[str, str]) -> None:
    admin = factories.user(db, admin=True)
    answer = client.get("/api/v1/usage", params=params, headers=headers(db, admin))
    assert answer.status_code == 422


def test_a_month_by_month_report_may_span_years(client: TestClient, db: Session,
                                                clock: LedgerClock) -> None:
    admin = factories.user(db, admin=True)
    params = {"from": "2025-01-01T00:00:00Z", "to": "2026-12-01T00:00:00Z", "group_by": "month"}
    assert client.get("/api/v1/usage", params=params, headers=headers(db, admin)).json()[
        "rows"] == []


def test_dates_without_a_time_or_an_offset_mean_utc_midnight(
    client: TestClient, db: Session, clock: LedgerClock
) -> None:
    t = _two_tenants(db, clock)
    body = client.get("/api/v1/usage", params={"from": "2026-11-02", "to": "2026-11-03"},
                      headers=headers(db, t.platform_admin)).json()
    assert (body["start"], body["end"]) == ("2026-11-02T00:00:00Z", "2026-11-03T00:00:00Z")


def _rows(path: str, text: str) -> object:
    return _csv(text) if path.endswith(".csv") else json.loads(text)["rows"]


@pytest.mark.parametrize("path", ["/api/v1/usage", "/api/v1/usage.csv"])
def test_tenants_see_only_their_own_usage(client: TestClient, db: Session, clock: LedgerClock,
                                          path: str) -> None:
    t = _two_tenants(db, clock)
    member = headers(db, t.acme_viewer)
    own = client.get(path, params=DAY, headers=member)
    assert own.status_code == 200
    assert "globex" not in own.text and "acme" in own.text
    named = client.get(path, params={**DAY, "tenant": "acme"}, headers=member)
    assert _rows(path, named.text) == _rows(path, own.text)
    hidden = client.get(path, params={**DAY, "tenant": "globex"}, headers=member)
    assert hidden.status_code == 404
    assert client.get(path, params={**DAY, "tenant": "nope"}, headers=member).status_code == 404
    stranger = headers(db, factories.user(db))
    assert "acme" not in client.get(path, params=DAY, headers=stranger).text
    assert client.get(path, params=DAY).status_code == 401
