"""Every page of every persona, at a phone's 390 px, a tablet's 800 px and a laptop's 1280 px:
the page does not scroll sideways, no word is broken inside, every action is within reach
(``layout.py`` says how each is measured). A screenshot of each page at 390 px goes to
``test-artifacts/browser/<test>/`` (``PORTAL_TEST_ARTIFACTS`` moves it).

One browser context per persona; each page is loaded once and the viewport resized, so the
whole walk costs about a minute."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import select

from app.database.core import utcnow
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.notifications.models import WebhookEndpoint
from app.process.devmode import DEMO_ADMIN, DEMO_MEMBER, DEMO_TENANT, DEMO_TENANT_ADMIN
from app.tenants.models import Tenant
from tests import factories
from tests.browser.conftest import H100, Screenshots, SimulatedPortal, seed_work
from tests.browser.layout import layout_problems

pytestmark = pytest.mark.browser

PHONE = 390
WIDTHS = (PHONE, 800, 1280)
HEIGHT = 844
MACHINE = "gpu-m1"
T = f"/t/{DEMO_TENANT}"
CLI_LOGIN = "/cli/login?port=54321&state=" + "s" * 43 + "&name=portalctl"

# The pages each persona reaches from the menus and links (the route matrix lists them all);
# the cluster page is walked apart, with its kubeconfig panel in each of its states.
MEMBER_PAGES = ("/", T, f"{T}/members", f"{T}/clusters", f"{T}/nodes", f"{T}/usage",
                f"{T}/clusters/train/template", "/tokens", CLI_LOGIN)
TENANT_ADMIN_PAGES = (*MEMBER_PAGES, f"{T}/quota-requests/new", f"{T}/webhooks", "/audit",
                      "/t/no-such-tenant")
PLATFORM_ADMIN_PAGES = (
    "/", "/admin/quota-requests", "/admin/tenants", "/admin/gpu-classes", "/admin/fleet",
    "/admin/fleet/hosts", "/admin/fleet/sleep", "/admin/fleet/sleeping",
    "/admin/nodes/h100-r1-n1", "/admin/fleet/suggest", "/admin/usage",
    "/admin/cluster-templates", "/admin/cluster-templates/default", "/admin/hosts",
    "/admin/hosts/local", "/admin/machines", f"/admin/machines/{MACHINE}", "/admin/webhooks",
    "/audit", "/tokens", T, f"{T}/usage")
NOT_FOUND = ("/t/no-such-tenant",)


@dataclass
class Walk:
    """Checks pages as they stand at each width, collecting what is wrong."""

    base: str
    shots: Screenshots
    found: list[str] = field(default_factory=list)
    checked: int = 0

    def visit(self, page: Page, persona: str, path: str) -> None:
        page.set_viewport_size({"width": PHONE, "height": HEIGHT})
        response = page.goto(self.base + path)
        assert response is not None
        expected = 404 if path in NOT_FOUND else 200
        assert response.status == expected, f"{persona} {path}: HTTP {response.status}"
        self.here(page, persona, path)

    def here(self, page: Page, persona: str, what: str) -> None:
        """The page as it is now, at each width (a screenshot at the phone's)."""
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": HEIGHT})
            self.found += [f"{persona} {what} at {width} px: {problem}"
                           for problem in layout_problems(page)]
            self.checked += 1
            if width == PHONE:
                name = re.sub(r"[^a-z0-9]+", "-", f"{persona} {what.split('?')[0]}")
                self.shots(page, name.strip("-"))


def sign_in(browser: Browser, base: str, email: str, walk: Walk | None = None) -> Page:
    """Signs ``email`` in through the local provider's persona page (checked by ``walk``)."""
    page = browser.new_context().new_page()
    page.goto(base + "/")
    page.get_by_role("link", name="Sign in with SSO").click()
    persona = page.locator(f"button[value='{email}']")
    expect(persona).to_be_visible()
    if walk is not None:
        walk.here(page, "signed out", "the local provider's sign-in page")
    persona.click()
    page.wait_for_url(base + "/")
    return page


def seed_pages(portal: SimulatedPortal) -> None:
    """seed_work's quota, pending request and cluster, a bare-metal machine, and a failing
    webhook endpoint with a long address for the tenant and the platform."""
    seed_work(portal)
    with portal.database.transaction() as db:
        h100 = db.scalars(select(GpuClass).where(GpuClass.product == H100)).one()
        host = db.scalars(select(HostCluster).where(HostCluster.is_default)).one()
        factories.machine(db, host, h100, MACHINE)
        tenant_id = db.scalars(select(Tenant.id).where(Tenant.slug == DEMO_TENANT)).one()
        db.add_all([WebhookEndpoint(
            tenant_id=owner, name="team-alerts", format="slack", secret_sealed="sealed",
            url="https://hooks.example.com/services/T0000000/B0000000/" + "x" * 60,
            state="failing", failing_since=utcnow(), consecutive_failures=9,
            last_error="HTTP 503: " + "upstream-unavailable-" * 8) for owner in (tenant_id, None)])


def walk_cluster_page(page: Page, persona: str, walk: Walk) -> None:
    """The cluster page Ready, with a kubeconfig just issued, its grant listed, a revoke being
    confirmed."""
    cluster = f"{T}/clusters/train"
    walk.visit(page, persona, cluster)
    expect(page.locator("#kubeconfig-form")).to_be_visible()
    page.get_by_role("button", name="Get kubeconfig").click()
    expect(page.locator("#issued-kubeconfig")).to_be_visible()
    walk.here(page, persona, cluster + " with a kubeconfig issued")
    walk.visit(page, persona, cluster)
    page.get_by_role("link", name="Revoke…").first.click()
    expect(page.get_by_role("button", name="Revoke it")).to_be_visible()
    walk.here(page, persona, cluster + " confirming a revoke")


def test_every_page_fits_phone_tablet_and_laptop_widths(
    browser: Browser, simulated_portal: SimulatedPortal, screenshots: Screenshots,
    record_property: Callable[[str, object], None],
) -> None:
    record_property("screenshots", str(screenshots.folder))  # listed at the end of the run
    seed_pages(simulated_portal)
    base = simulated_portal.url
    walk = Walk(base, screenshots)

    signed_out = browser.new_context().new_page()
    walk.visit(signed_out, "signed out", "/")
    # Swagger UI; not /redoc, whose code samples scroll sideways in Redoc's own styling.
    walk.visit(signed_out, "signed out", "/docs")
    signed_out.context.close()

    alice = sign_in(browser, base, DEMO_TENANT_ADMIN, walk)
    alice.goto(base + f"{T}/clusters/train")
    expect(alice.locator("#cluster-phase")).to_have_text("Ready", timeout=60_000)
    walk_cluster_page(alice, "tenant admin", walk)
    for path in TENANT_ADMIN_PAGES:
        walk.visit(alice, "tenant admin", path)
    alice.context.close()

    bob = sign_in(browser, base, DEMO_MEMBER)
    walk_cluster_page(bob, "member", walk)
    for path in MEMBER_PAGES:
        walk.visit(bob, "member", path)
    bob.context.close()

    admin = sign_in(browser, base, DEMO_ADMIN)
    for path in PLATFORM_ADMIN_PAGES:
        walk.visit(admin, "platform admin", path)
    admin.context.close()

    (screenshots.folder / "faults.txt").write_text("".join(f"{line}\n" for line in walk.found))
    print(f"layout: {walk.checked} page views checked; "
          f"screenshots at {PHONE} px in {screenshots.folder}")
    assert not walk.found, "\n".join(
        [f"{len(walk.found)} layout faults (screenshots at {PHONE} px: {screenshots.folder}):",
         *walk.found])
