"""Each main page, as the simulated host's demo data fills it, has no serious or critical
accessibility violation by axe-core (vendored under ``vendor/axe-core``)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, expect

from app.process.devmode import DEMO_TENANT, DEMO_TENANT_ADMIN
from tests.browser.accessibility import serious_violations
from tests.browser.conftest import Screenshots, SimulatedPortal, seed_work, sign_in_on

pytestmark = pytest.mark.browser

TENANT_PAGES = ("/", f"/t/{DEMO_TENANT}", f"/t/{DEMO_TENANT}/quota-requests/new",
                f"/t/{DEMO_TENANT}/clusters", f"/t/{DEMO_TENANT}/clusters/train", "/audit",
                "/tokens", f"/t/{DEMO_TENANT}/usage", "/t/no-such-tenant")
ADMIN_PAGES = ("/", "/admin/quota-requests", "/admin/fleet", "/admin/nodes/h100-r1-n1",
               "/admin/fleet/hosts", "/admin/fleet/suggest", "/admin/tenants",
               "/admin/gpu-classes", "/admin/usage",
               "/admin/hosts", "/admin/hosts/local", "/admin/idle-gpus", "/audit")


def check(page: Page, url: str, shots: Screenshots, found: dict[str, list[str]]) -> None:
    page.goto(url)
    shots(page, url.split("/", 3)[-1].replace("/", "-") or "home")
    violations = serious_violations(page)
    if violations:
        found[url] = [str(v) for v in violations]


def test_main_pages_have_no_serious_or_critical_violations(
    browser: Browser, simulated_portal: SimulatedPortal, screenshots: Screenshots,
) -> None:
    seed_work(simulated_portal)
    base = simulated_portal.url
    found: dict[str, list[str]] = {}
    signed_out = browser.new_context(bypass_csp=True).new_page()
    check(signed_out, base + "/", screenshots, found)

    alice = sign_in_on(browser.new_context(bypass_csp=True), base, DEMO_TENANT_ADMIN)
    alice.goto(f"{base}/t/{DEMO_TENANT}/clusters/train")
    expect(alice.locator("#cluster-phase")).to_have_text("Ready", timeout=60_000)
    alice.get_by_role("button", name="Get kubeconfig").click()
    expect(alice.get_by_test_id("simulated-kubeconfig-note")).to_be_visible()
    screenshots(alice, "cluster-with-kubeconfig")
    violations = serious_violations(alice)
    if violations:
        found["cluster page with an issued kubeconfig"] = [str(v) for v in violations]
    for path in TENANT_PAGES:
        check(alice, base + path, screenshots, found)

    admin = sign_in_on(browser.new_context(bypass_csp=True), base, "admin@example.com")
    for path in ADMIN_PAGES:
        check(admin, base + path, screenshots, found)
    assert found == {}
