"""In a real browser: pages update over Server-Sent Events without reloading, fall back to
polling without EventSource, and fit a phone's screen (axe-core checks: test_accessibility.py).
Screenshots go to test-artifacts/browser/."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import select, update

from app.clusters.models import VirtualCluster
from app.database.core import Database
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.kit.config import Settings
from app.quotas.models import QuotaRequest, TenantQuota
from app.tenants.models import Tenant
from app.web import live
from tests import factories
from tests.browser.accessibility import serious_violations
from tests.browser.conftest import demo_database
from tests.support.serving import serving

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"


@dataclass
class Portal:
    base: str
    database: Database


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(type_: str, status: str) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": type_, "message": "",
            "lastTransitionTime": _stamp(), "observedGeneration": 1}


def _seed(database: Database) -> None:
    """The demo tenant with quota, a provisioning cluster, a small fleet and a request."""
    with database.transaction() as db:
        demo = db.scalars(select(Tenant).where(Tenant.slug == "demo")).one()
        h100 = db.scalars(select(GpuClass)).one()
        host = db.scalars(select(HostCluster)).one()
        db.add(TenantQuota(tenant_id=demo.id, gpu_class_id=h100.id, gpus=16))
        factories.cluster(db, demo, host, "train", gpu_class_id=h100.id, gpus=4,
                          conditions=[_condition("NamespaceReady", "True"),
                                      _condition("Ready", "False")])
        for name, ready in (("h100-a1", True), ("h100-a2", True), ("h100-a3", False)):
            factories.node(db, host, h100, name, rack="a", zone="z1", ready=ready)
        factories.assignment(db, factories.node(db, host, h100, "h100-b1", rack="b"), demo)
        factories.quota_request(db, demo, h100, gpus=8)


@pytest.fixture
def portal(tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[Portal]:
    monkeypatch.setattr(live, "TIMING", live.Timing(check_seconds=0.3, lifetime_seconds=60))
    database = demo_database(tmp_path)
    _seed(database)
    with serving(settings.model_copy(update={"database_url": database.url}), database) as base:
        yield Portal(base, database)
    database.dispose()


def _signed_in(browser: Browser, base: str, email: str, *, without_event_source: bool = False
               ) -> Page:
    # bypass_csp: the test injects axe-core, which the portal's CSP rightly refuses.
    context = browser.new_context(bypass_csp=True, viewport={"width": 1280, "height": 900})
    if without_event_source:
        context.add_init_script("delete window.EventSource;")
    page = context.new_page()
    page.goto(base + "/")
    page.get_by_role("link", name="Sign in with SSO").click()
    page.locator(f"button[value='{email}']").click()
    page.wait_for_url(base + "/")
    return page


def _shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _set_cluster(database: Database, *conditions: dict[str, Any]) -> None:
    with database.transaction() as db:
        db.execute(update(VirtualCluster).where(VirtualCluster.name == "train")
                   .values(conditions=list(conditions)))


def _mark_page(page: Page) -> None:
    """A mark a full reload would wipe out."""
    page.evaluate("window.__notReloaded = true")


def _not_reloaded(page: Page) -> bool:
    return bool(page.evaluate("window.__notReloaded === true"))


def test_cluster_conditions_arrive_over_sse(browser: Browser, portal: Portal) -> None:
    page = _signed_in(browser, portal.base, "alice@example.com")
    page.goto(portal.base + "/t/demo/clusters/train")
    expect(page.locator("#cluster-live")).to_have_attribute("data-live", "open")
    expect(page.locator("#cluster-phase")).to_have_text("Provisioning")
    _mark_page(page)
    _set_cluster(portal.database, _condition("NamespaceReady", "True"),
                 _condition("Ready", "True"))
    expect(page.locator("#cluster-phase")).to_have_text("Ready")
    expect(page.locator("#conditions-chart")).to_be_visible()
    assert _not_reloaded(page)
    _shot(page, "cluster-live")


def test_without_event_source_the_page_polls(browser: Browser, portal: Portal) -> None:
    page = _signed_in(browser, portal.base, "alice@example.com", without_event_source=True)
    page.goto(portal.base + "/t/demo/clusters/train")
    expect(page.locator("#cluster-phase")).to_have_text("Provisioning")
    _mark_page(page)
    _set_cluster(portal.database, _condition("Ready", "True"))
    expect(page.locator("#cluster-phase")).to_have_text("Ready")
    assert _not_reloaded(page)
    expect(page.locator("#cluster-live")).not_to_have_attribute("data-live", "open")


def test_the_queue_shows_a_new_request_by_itself(browser: Browser, portal: Portal) -> None:
    page = _signed_in(browser, portal.base, "admin@example.com")
    page.goto(portal.base + "/admin/quota-requests")
    expect(page.locator("#queue-live")).to_have_attribute("data-live", "open")
    expect(page.locator("#queue tbody tr")).to_have_count(1)
    _mark_page(page)
    with portal.database.transaction() as db:
        demo = db.scalars(select(Tenant).where(Tenant.slug == "demo")).one()
        h100 = db.scalars(select(GpuClass)).one()
        db.add(QuotaRequest(tenant_id=demo.id, gpu_class_id=h100.id, gpus=2,
                            reason="arrived while watching"))
    expect(page.locator("#queue")).to_contain_text("arrived while watching")
    assert _not_reloaded(page)
    _shot(page, "queue-live")


def test_ending_an_assignment_asks_for_the_name_and_toasts(browser: Browser,
                                                           portal: Portal) -> None:
    page = _signed_in(browser, portal.base, "admin@example.com")
    page.goto(portal.base + "/admin/nodes/h100-b1")
    page.get_by_label("Type h100-b1 to confirm").fill("h100-b2")
    page.get_by_role("button", name="End assignment").click()
    expect(page.locator("#end-assignment-form-error")).to_contain_text("exactly to confirm")
    page.get_by_label("Type h100-b1 to confirm").fill("h100-b1")
    page.get_by_role("button", name="End assignment").click()
    expect(page.locator("#toasts")).to_contain_text("back in the shared pool")
    expect(page.locator("#assignment")).to_contain_text("No tenant")


def test_a_phone_sized_screen_keeps_pages_usable(browser: Browser, portal: Portal) -> None:
    page = _signed_in(browser, portal.base, "alice@example.com")
    page.set_viewport_size({"width": 390, "height": 844})
    for path in ("/t/demo", "/t/demo/clusters/train"):
        page.goto(portal.base + path)
        width = page.evaluate("document.documentElement.scrollWidth")
        wide = page.evaluate("""[...document.querySelectorAll('body *')]
            .filter(e => e.getBoundingClientRect().right > 392)
            .slice(0, 5).map(e => e.tagName + '#' + e.id + '.' + e.className)""")
        assert width <= 390, (path, width, wide)  # wide tables scroll inside their own box
        assert not serious_violations(page)
    _shot(page, "dashboard-phone")


def test_the_node_table_sorts_and_filters_in_place(browser: Browser, portal: Portal) -> None:
    page = _signed_in(browser, portal.base, "admin@example.com")
    page.goto(portal.base + "/admin/fleet")
    _mark_page(page)
    page.locator("#node-table th").get_by_role("link", name="Rack").click()
    page.wait_for_url("**/admin/fleet?sort=rack")
    page.locator("#node-filters select[name=ready]").select_option("false")
    page.wait_for_url("**ready=false**")
    expect(page.locator("#node-table tbody tr")).to_have_count(1)
    expect(page.locator("#node-table")).to_contain_text("h100-a3")
    page.locator("#node-filters select[name=ready]").select_option("")
    page.locator("#node-filters input[name=rack]").type("b")  # filters as one types
    page.wait_for_url("**rack=b**")
    expect(page.locator("#node-table tbody tr")).to_have_count(1)
    expect(page.locator("#node-table")).to_contain_text("h100-b1")
    assert _not_reloaded(page)
    page.go_back()
    page.wait_for_url("**ready=**")
