"""The usage pages: who may see which, the CSV button, and charts one can read without colour
(title, description, patterns, legend, and a table with the same figures)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from app.kube.usage import HostUsage, NamespaceUse, QueueUse
from app.nodes.models import Node
from app.usage.sampling import record_usage
from app.web.charts.series import Series, grouped_bars, lines, stacked_bars
from tests.support.paths import ROOT
from tests.support.tenancy import Tenancy, build_tenancy, headers
from tests.support.web import HTML
from tests.usage.support import T0, LedgerClock, approve_quota, create_cluster, fix_clock

DAYS = {"from": "2026-11-02", "to": "2026-11-04"}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


def _tenancy(db: Session, clock: LedgerClock) -> Tenancy:
    t = build_tenancy(db)
    approve_quota(db, t, 8)
    clock.at(hours=2)
    create_cluster(db, t, "train", 3)
    approve_quota(db, t, 2, slug="globex", requester=t.principal(t.globex_admin))
    clock.at(hours=30)
    return t


def test_the_tenant_page_charts_what_its_table_lists(client: TestClient, db: Session,
                                                     clock: LedgerClock) -> None:
    t = _tenancy(db, clock)
    page = client.get("/t/acme/usage", params=DAYS, headers={**HTML, **headers(
        db, t.acme_viewer)})
    assert page.status_code == 200
    daily = page.text.split('id="daily-chart"')[1].split("</figure>")[0]
    assert re.search(r'<svg[^>]+role="img"[^>]+aria-labelledby="(\S+)-title \1-desc"', daily)
    assert "<title" in daily and "<desc" in daily and t.h100.display_name in daily
    charted = dict(re.findall(r'data-category="([\d-]+)" data-value="([\d.]+)"', daily))
    listed = dict(re.findall(r'data-period="([\d-]+)"[^>]*>.*?class="allocated" '
                             r'data-value="([\d.]+)"', page.text, flags=re.S))
    assert charted == listed == {"2026-11-02": "66.0", "2026-11-03": "18.0"}
    title = re.search(r'<title id="[^"]+">([^<]*)</title>', daily)
    assert title is not None and title.group(1).endswith("; 2026-11-03: so far")  # 06:00
    assert 'href="/api/v1/usage.csv?from=2026-11-02T00%3A00%3A00%2B00%3A00' in page.text
    assert "tenant=acme" in page.text
    assert "globex" not in page.text


def test_the_now_chart_and_table_show_approved_allocated_and_in_use(
    client: TestClient, db: Session, clock: LedgerClock
) -> None:
    t = _tenancy(db, clock)
    page = client.get("/t/acme/usage", headers={**HTML, **headers(db, t.acme_viewer)}).text
    now = page.split('id="now-chart"')[1].split("</figure>")[0]
    bars = re.findall(r'data-series="([\w ]+)" data-category="[^"]+" data-value="([\d.]+)"', now)
    assert bars == [("approved", "8.0"), ("allocated", "3.0"), ("in use", "0.0"),
                    ("of which burst", "0.0")]
    assert "3 of 8 approved" in page and "not sampled yet" in page


def test_tenants_see_their_own_page_only(client: TestClient, db: Session,
                                         clock: LedgerClock) -> None:
    t = _tenancy(db, clock)
    viewer = {**HTML, **headers(db, t.acme_viewer)}
    assert client.get("/t/globex/usage", headers=viewer).status_code == 404
    assert client.get("/admin/usage", headers=viewer).status_code == 403
    admin = {**HTML, **headers(db, t.platform_admin)}
    assert client.get("/t/globex/usage", headers=admin).status_code == 200


def test_usage_in_the_nav_leads_each_to_their_page(client: TestClient, db: Session,
                                                   clock: LedgerClock) -> None:
    t = _tenancy(db, clock)
    viewer = {**HTML, **headers(db, t.acme_viewer)}
    assert 'href="/usage"' in client.get("/t/acme/usage", headers=viewer).text
    landing = client.get("/usage", headers=viewer, follow_redirects=False)
    assert landing.headers["location"] == "/t/acme/usage"
    admin = {**HTML, **headers(db, t.platform_admin)}
    assert client.get("/usage", headers=admin,
                      follow_redirects=False).headers["location"] == "/admin/usage"


def test_a_bad_range_on_a_page_is_a_422(client: TestClient, db: Session,
                                        clock: LedgerClock) -> None:
    t = _tenancy(db, clock)
    answer = client.get("/t/acme/usage", params={"from": "2026-11-04", "to": "2026-11-02"},
                        headers={**HTML, **headers(db, t.acme_viewer)})
    assert answer.status_code == 422
    assert "before" in answer.text


@pytest.mark.parametrize("params", [{"from": "0001-01-01T00:00:00+01:00"},
                                    {"to": "9999-12-31T23:59:59-01:00"}])
def test_a_range_off_the_calendar_on_a_page_is_a_422(client: TestClient, db: Session,
                                                      params: dict[str, str]) -> None:
    t = build_tenancy(db)
    answer = client.get("/t/acme/usage", params=params,
                        headers={**HTML, **headers(db, t.acme_viewer)})
    assert answer.status_code == 422
    assert "must lie between 1970-01-01 and 9999-01-01" in answer.text


def test_the_admin_page_has_a_chart_per_class_with_its_figures(
    client: TestClient, db: Session, clock: LedgerClock
) -> None:
    t = _tenancy(db, clock)
    _nodes_first_seen(db, T0 - timedelta(days=1))
    figure = _class_figure(client, db, t)
    points = re.findall(r'data-series="([\w ()]+)" data-category="2026-11-02" '
                        r'data-value="([\d.]+)"', figure)
    # 64 GPUs on the nodes; guaranteed: acme's 8 all day, globex's 2 from 02:00, as a mean
    assert points == [("capacity", "64.0"),
                      ("guaranteed", str(round((8 * 24 + 2 * 22) / 24, 3))), ("in use", "0.0"),
                      ("of which burst", "0.0")]
    assert "<details><summary>Figures for" in figure
    shown = re.search(r'<text class="chart-title"[^>]*>(.*?)</text>', figure)
    assert shown is not None  # a visible title, in as many lines as it takes
    assert " ".join(re.findall(r"<tspan[^>]*>([^<]*)</tspan>", shown.group(1))) == (
        f"{t.h100.display_name}: mean GPUs per day (UTC), today now")


def _nodes_first_seen(db: Session, at: datetime) -> None:
    db.execute(update(Node).values(first_seen_at=at))
    db.commit()


def _class_figure(client: TestClient, db: Session, t: Tenancy) -> str:
    page: str = client.get("/admin/usage", params=DAYS, headers={**HTML, **headers(
        db, t.platform_admin)}).text
    assert 'id="csv-download"' in page
    figure = page.split(f'<figure class="chart-figure" data-gpu-class="{t.h100.product}">')[1]
    return figure.split("</figure>")[0]


def test_capacity_is_drawn_only_from_when_the_nodes_were_seen(
    client: TestClient, db: Session, clock: LedgerClock
) -> None:
    """The fleet's nodes appeared on the second day: the first has no capacity point (not
    today's 64 drawn back), and the second the 64 GPUs they had since they came."""
    t = _tenancy(db, clock)  # the clock stands at 2026-11-03 06:00
    _nodes_first_seen(db, T0 + timedelta(days=1, hours=3))
    figure = _class_figure(client, db, t)
    capacity = dict(re.findall(r'data-series="capacity" data-category="([\d-]+)" '
                               r'data-value="([\d.]+)"', figure))
    assert capacity == {"2026-11-03": "64.0"}
    assert "capacity (GPUs): 2026-11-02 no record, 2026-11-03 64" in figure


def _series(n: int) -> list[Series]:
    return [Series(f"class {k}", [float(k + 1), 2.0]) for k in range(n)]


@pytest.mark.parametrize("chart", [stacked_bars, grouped_bars])
def test_each_bar_series_has_its_own_pattern_and_a_named_legend(chart: object) -> None:
    assert callable(chart)
    svg = str(chart("T", "D", ["a", "b"], _series(4), "GPU-hours"))
    patterns = re.findall(r'<pattern id="(chart\d+-p\d)"[^>]*><rect[^>]*/>(.*?)</pattern>', svg)
    assert len({shape for _id, shape in patterns}) == 4  # differ in shape, not only colour
    for k in range(4):
        assert f">class {k}</text>" in svg


def test_each_line_has_its_own_dash_and_marker() -> None:
    svg = str(lines("T", "D", ["a", "b"], _series(3), "GPUs"))
    dashes = re.findall(r'<polyline[^>]*stroke-dasharray="([^"]*)"', svg)
    assert len(set(dashes)) == 3
    assert "<circle" in svg and "<rect" in svg and "<path" in svg


def test_chart_text_is_escaped() -> None:
    svg = str(stacked_bars("<b>", "<i>", ["<x>"], [Series("<script>", [1.0])], "&"))
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "<b>" not in svg


def test_the_dashboard_shows_in_use_from_the_latest_pass_not_the_allocation(
    client: TestClient, db: Session, clock: LedgerClock
) -> None:
    t = _tenancy(db, clock)
    viewer = {**HTML, **headers(db, t.acme_viewer)}
    before = client.get("/t/acme", headers=viewer).text
    assert _in_use_cell(before) == "not sampled yet"
    assert "in use not sampled yet" in before  # the chart's description says so too
    host = db.scalar(select(VirtualCluster.host_cluster_id)
                     .where(VirtualCluster.name == "train"))
    assert host is not None
    for taken_s, bound in ((100, 3.0), (200, 1.0)):  # the newest pass counts
        usage = HostUsage(queues=[QueueUse("acme", "train", bound, 3.0)],
                          namespaces=[NamespaceUse("acme", "train", 3.0, 3.0)])
        record_usage(db, host, usage, taken_s, {})
    db.commit()
    after = client.get("/t/acme", headers=viewer).text
    assert _in_use_cell(after) == "1"
    assert 'data-series="in-use" data-value="1"' in after


def _in_use_cell(page: str) -> str:
    found = re.search(r'<td class="in-use">([^<]*)</td>', page)
    assert found is not None
    return found.group(1).strip()


def test_today_on_the_admin_chart_is_the_level_now_not_a_mean_of_the_day_so_far(
    client: TestClient, db: Session, clock: LedgerClock
) -> None:
    """A fresh install, six hours into the day: the fleet came at five, 8 GPUs were approved
    and 3 bound a minute ago. Means of the day so far would draw about 0 beside 64."""
    t = build_tenancy(db)
    _nodes_first_seen(db, T0 + timedelta(hours=5))
    clock.at(hours=6)
    approve_quota(db, t, 8)
    create_cluster(db, t, "train", 3)
    host = db.scalar(select(VirtualCluster.host_cluster_id)
                     .where(VirtualCluster.name == "train"))
    assert host is not None
    record_usage(db, host, HostUsage(queues=[QueueUse("acme", "train", 3.0, 3.0)],
                                     namespaces=[NamespaceUse("acme", "train", 3.0, 3.0)]),
                 int(clock.now.timestamp()), {})
    db.commit()
    clock.at(hours=6, minutes=1)
    figure = _class_figure(client, db, t)
    today = dict(re.findall(r'data-series="([\w ()]+)" data-category="2026-11-02" '
                            r'data-value="([\d.]+)"', figure))
    assert today == {"capacity": "64.0", "guaranteed": "8.0", "in use": "3.0",
                     "of which burst": "0.0"}
    assert "Today is not over: its point is the level now" in figure


def test_the_now_chart_carries_each_bars_number(client: TestClient, db: Session,
                                                clock: LedgerClock) -> None:
    t = _tenancy(db, clock)
    page = client.get("/t/acme/usage", headers={**HTML, **headers(db, t.acme_viewer)}).text
    now = page.split('id="now-chart"')[1].split("</figure>")[0]
    assert re.findall(r'<text class="bar-value"[^>]*>([^<]*)</text>', now) == [
        "8", "3", "0", "0"]


def test_chart_text_is_readable_at_the_narrowest_a_chart_is_drawn(
    client: TestClient, db: Session, clock: LedgerClock
) -> None:
    """Below its CSS min-width a chart's figure scrolls; at that width, no text of any chart
    of the usage pages is drawn smaller than 11 px."""
    css = (ROOT / "static" / "css" / "portal.css").read_text()
    rule = re.search(r"svg\.chart \{[^}]*min-width: (\d+)px", css)
    assert rule is not None
    narrowest = float(rule.group(1))
    t = _tenancy(db, clock)
    _nodes_first_seen(db, T0 - timedelta(days=1))
    pages = [client.get("/t/acme/usage", params=DAYS,
                        headers={**HTML, **headers(db, t.acme_viewer)}).text,
             client.get("/admin/usage", params=DAYS,
                        headers={**HTML, **headers(db, t.platform_admin)}).text]
    charts = [svg for page in pages for svg in re.findall(r"<svg.*?</svg>", page, re.S)]
    assert len(charts) >= 5
    for svg in charts:
        view = re.search(r'viewBox="0 0 ([\d.]+)', svg)
        assert view is not None
        scale = min(narrowest / float(view.group(1)), 1.0)
        for size in re.findall(r'<text[^>]*font-size="([\d.]+)"', svg):
            assert float(size) * scale >= 11, (size, view.group(1), svg[:200])
