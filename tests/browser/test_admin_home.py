"""The platform admin at a 1440 px screen: the navigation on one line (the admin pages in one
menu), a home that counts what needs them now, and the usage and fleet charts, each with its
title and sized to its card. Screenshots of each (see ``Screenshots``)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import func, select

from app.clusters import conditions as cond
from app.clusters.models import VirtualCluster
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.process.devmode import DEMO_TENANT
from app.quotas.models import QuotaRequest
from app.tenants.models import Tenant
from tests import factories
from tests.browser.conftest import Screenshots, SimulatedPortal, sign_in_on

pytestmark = pytest.mark.browser

WIDE = {"width": 1440, "height": 900}


def wrapped(title: str, then: str | None = None) -> re.Pattern[str]:
    """A chart title as its words, whatever line (tspan) each is on; ``then``: what may
    follow it (e.g. "; " and the day under way)."""
    words = r"\s*".join(re.escape(word) for word in title.split())
    rest = "" if then is None else f"({re.escape(then)}.*)?"
    return re.compile(f"^{words}{rest}$")

def _admin_at(browser: Browser, base: str, viewport: dict[str, int]) -> Page:
    return sign_in_on(browser.new_context(viewport=viewport), base, "admin@example.com")  # type: ignore[arg-type]


def _troubles(portal: SimulatedPortal) -> None:
    """Two requests waiting, a host that fails its checks, a failed cluster, and some quota
    and a cluster so that the usage charts have something to draw. The failed cluster is not
    queued for the worker, so it stays failed while the test looks."""
    with portal.database.transaction() as db:
        demo = db.scalars(select(Tenant).where(Tenant.slug == DEMO_TENANT)).one()
        h100 = db.scalars(select(GpuClass).where(GpuClass.product == "NVIDIA-H100-80GB-HBM3")).one()
        for gpus in (8, 16):
            factories.quota_request(db, demo, h100, gpus=gpus)
        sick = factories.host_cluster(db, "gpu-eu-2", region="eu")
        sick.health_reachable = False
        factories.quota(db, demo, h100, 8)
        local = db.scalars(select(HostCluster).where(HostCluster.is_default)).one()
        db.add(
            VirtualCluster(
                tenant_id=demo.id,
                host_cluster_id=local.id,
                name="broken",
                gpu_class_id=h100.id,
                gpus=4,
                kubernetes_version="1.32.4",
                placement="shared-pool",
                conditions=[
                    {
                        "type": cond.FAILED,
                        "status": "True",
                        "reason": "InstallFailed",
                        "message": "helm: the release could not be installed",
                        "lastTransitionTime": "2026-12-01T08:00:00Z",
                        "observedGeneration": 1,
                    }
                ],
            )
        )


def _unhealthy_hosts(portal: SimulatedPortal) -> int:
    with portal.database.transaction() as db:
        return sum(
            1
            for host in db.scalars(select(HostCluster))
            if host.health_reachable is False
            or any(not c.get("passed") for c in host.health_checks or [])
        )


def _pending(portal: SimulatedPortal) -> int:
    with portal.database.transaction() as db:
        return int(
            db.scalar(
                select(func.count())
                .select_from(QuotaRequest)
                .where(QuotaRequest.state == "pending")
            )
            or 0
        )


def _nav_rows(page: Page) -> Any:
    return page.evaluate("""() => {
        const items = [...document.querySelectorAll('.topbar .nav > a, '
            + '.topbar .nav > details > summary, .topbar .brand, .topbar .account')];
        return {tops: items.map((e) => Math.round(e.getBoundingClientRect().top)),
                bar: document.querySelector('.topbar').getBoundingClientRect().height,
                overflow: document.documentElement.scrollWidth - window.innerWidth};
    }""")


def test_the_navigation_fits_one_line_at_1440_px(
    browser: Browser,
    simulated_portal: SimulatedPortal,
    screenshots: Screenshots,
) -> None:
    page = _admin_at(browser, simulated_portal.url, WIDE)
    rows = _nav_rows(page)
    assert max(rows["tops"]) - min(rows["tops"]) <= 4, rows  # brand, links, menu, account
    assert rows["bar"] < 64 and rows["overflow"] <= 0, rows
    nav = page.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link", name="Tenants")).to_be_hidden()
    nav.get_by_text("Admin", exact=True).click()
    for name in ("Tenants", "GPU classes", "Cluster templates", "Host clusters"):
        expect(nav.get_by_role("link", name=name)).to_be_visible()
    screenshots(page, "admin-menu-open")
    page.keyboard.press("Escape")
    expect(nav.get_by_role("link", name="Tenants")).to_be_hidden()
    nav.get_by_text("Admin", exact=True).click()
    nav.get_by_role("link", name="Host clusters").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Host clusters")


@pytest.mark.parametrize("width", [1024, 390])
def test_narrower_screens_wrap_the_navigation_without_scrolling_sideways(
    browser: Browser,
    simulated_portal: SimulatedPortal,
    screenshots: Screenshots,
    width: int,
) -> None:
    page = _admin_at(browser, simulated_portal.url, {"width": width, "height": 800})
    assert _nav_rows(page)["overflow"] <= 0
    page.get_by_role("navigation", name="Main").get_by_text("Admin", exact=True).click()
    expect(page.get_by_role("link", name="Cluster templates")).to_be_visible()
    screenshots(page, f"admin-home-{width}px")


def test_the_admin_home_counts_what_needs_them(
    browser: Browser,
    simulated_portal: SimulatedPortal,
    screenshots: Screenshots,
) -> None:
    _troubles(simulated_portal)
    page = _admin_at(browser, simulated_portal.url, WIDE)
    page.reload()
    requests = page.locator("#attention-requests")
    expect(requests).to_have_attribute("data-count", str(_pending(simulated_portal)))
    expect(requests.locator(".count")).to_have_text("2")
    expect(requests).to_contain_text("Oldest: demo asks for 8")
    hosts = page.locator("#attention-hosts")
    expect(hosts.locator("[data-host='gpu-eu-2']")).to_contain_text("unreachable")
    expect(hosts).to_have_attribute("data-count", str(_unhealthy_hosts(simulated_portal)))
    clusters = page.locator("#attention-clusters")
    expect(clusters).to_have_attribute("data-count", "1")
    expect(clusters.locator(f"[data-cluster='{DEMO_TENANT}/broken']")).to_contain_text(
        "the release could not be installed"
    )
    capacity = page.locator("#attention-capacity")
    expect(capacity.get_by_role("row").filter(has_text="NVIDIA-H100-80GB-HBM3")).to_be_visible()
    content = page.locator("main").bounding_box()
    assert content is not None and content["width"] > 1300  # the width is used
    screenshots(page, "admin-home")
    requests.get_by_role("link", name="Open the approval queue").click()
    expect(page.get_by_role("row").filter(has_text="NVIDIA-H100")).to_have_count(2)


def _chart_fills_its_card(page: Page, figure: str) -> None:
    sizes = page.evaluate(
        """(selector) => {
        const figure = document.querySelector(selector);
        const svg = figure.querySelector('svg');
        return {figure: figure.clientWidth, svg: svg.getBoundingClientRect().width};
    }""",
        figure,
    )
    padding = 2 * 12
    assert sizes["svg"] >= sizes["figure"] - padding - 2, sizes


def test_usage_and_fleet_charts_have_titles_and_fill_their_cards(
    browser: Browser,
    simulated_portal: SimulatedPortal,
    screenshots: Screenshots,
) -> None:
    _troubles(simulated_portal)
    base = simulated_portal.url
    page = _admin_at(browser, base, WIDE)
    page.goto(base + "/admin/fleet")
    expect(page.get_by_role("row").filter(has_text="gb200-c1-n1")).to_be_visible()
    page.reload()
    expect(page.locator("#capacity-chart text.chart-title")).to_have_text(
        "GPUs per GPU class: dedicated, guaranteed, free"
    )
    _chart_fills_its_card(page, "#fleet-capacity-section .chart-figure")
    screenshots(page, "fleet-nodes-and-classes")
    page.goto(base + "/admin/fleet/hosts")
    expect(page.locator("#region-capacity-chart text.chart-title")).to_have_text(
        "GPUs per region and GPU class"
    )
    screenshots(page, "fleet-by-host-and-region")
    page.goto(base + "/admin/fleet/sleep")
    screenshots(page, "fleet-freed-by-sleep")

    page.goto(base + "/admin/usage")
    figure = page.locator("figure[data-gpu-class='NVIDIA-H100-80GB-HBM3']")
    expect(figure.locator("text.chart-title")).to_have_text(
        wrapped("H100 80GB: mean GPUs per day (UTC), today now"))
    _chart_fills_its_card(page, "figure[data-gpu-class='NVIDIA-H100-80GB-HBM3']")
    screenshots(page, "usage-admin-charts")
    page.goto(f"{base}/t/{DEMO_TENANT}/usage")
    expect(page.locator("#daily-chart text.chart-title")).to_have_text(wrapped(
        "GPU-hours allocated to clusters per day (UTC), by GPU class", then="; "))
    for chart in ("#now-chart", "#daily-chart", "#in-use-chart"):
        _chart_fills_its_card(page, chart)
    screenshots(page, "usage-tenant-charts")
