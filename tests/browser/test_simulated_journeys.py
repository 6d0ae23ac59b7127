"""The newcomer's journeys in a real browser, on `portal dev`'s simulated host with its worker
running: the whole loop from quota to a revoked kubeconfig, a spare machine registered on the
Machines page joining as a node, what a member and a viewer may not do, and another tenant's
pages answering 404 (docs/journey.md lists the steps and names these tests). Each step leaves
a screenshot (see ``Screenshots``).

Selectors are roles, labels and visible names, plus a few ids the pages promise (``#cluster-phase``,
``#kubeconfig-yaml``) and the simulated host's ``data-testid``s."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import Browser, Dialog, Locator, Page, expect
from sqlalchemy import select

from app.auth import service as auth_service
from app.process.devmode import DEMO_TENANT
from app.tenants.models import Tenant
from tests import factories
from tests.browser.conftest import Screenshots, SimulatedPortal, sign_in_typed, signed_in_page
from tests.support import oidc

pytestmark = pytest.mark.browser

H100 = "NVIDIA-H100-80GB-HBM3"
READY_TIMEOUT_MS = 60_000


def choose_option(select: Locator, text: str) -> None:
    """Picks the option whose label mentions ``text`` (labels carry display names)."""
    option = select.locator("option", has_text=text).first
    select.select_option(value=option.get_attribute("value"))


def request_quota(page: Page, base: str, shots: Screenshots) -> None:
    page.get_by_role("link", name="Request GPU quota").first.click()
    form = page.locator("form", has=page.get_by_role("button", name="Send request"))
    choose_option(form.get_by_label("GPU class"), H100)
    form.get_by_role("spinbutton", name="GPUs", exact=True).fill("8")
    form.get_by_label("Reason").fill("first fine-tuning run")
    shots(page, "alice-requests-quota")
    form.get_by_role("button", name="Send request").click()
    page.wait_for_url(f"{base}/t/{DEMO_TENANT}")
    expect(page.get_by_text("first fine-tuning run")).to_be_visible()


def approve(page: Page, shots: Screenshots) -> None:
    page.get_by_role("link", name="Quota requests").click()
    row = page.get_by_role("row").filter(has_text="first fine-tuning run")
    shots(page, "admin-approval-queue")
    row.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("row").filter(has_text="first fine-tuning run")).to_contain_text(
        "approved")
    shots(page, "admin-approved")


def dedicate(page: Page, base: str, node: str, shots: Screenshots) -> None:
    page.goto(f"{base}/admin/fleet?ready=false")  # the table's state is in the URL
    expect(page.get_by_role("row").filter(has_text="h100-r2-n4")).to_contain_text("not ready")
    page.get_by_role("link", name="Fleet").click()
    expect(page.get_by_role("row").filter(has_text="gb200-c1-n1")).to_be_visible()
    shots(page, "admin-fleet")
    page.get_by_role("link", name=node, exact=True).click()
    page.get_by_label("Tenant").fill(DEMO_TENANT)
    page.get_by_role("button", name="Dedicate to tenant").click()
    expect(page.get_by_role("link", name=DEMO_TENANT, exact=True)).to_be_visible()
    shots(page, "admin-dedicated-node")


def create_cluster(page: Page, base: str, shots: Screenshots) -> None:
    page.goto(f"{base}/t/{DEMO_TENANT}")
    page.get_by_role("link", name="Create a cluster").click()
    form = page.locator("form", has=page.get_by_role("button", name="Create cluster"))
    form.get_by_label("Name").fill("train")
    choose_option(form.get_by_label("Placement"), "Dedicated nodes")
    choose_option(form.get_by_label("GPU class"), H100)
    form.get_by_role("spinbutton", name="GPUs", exact=True).fill("8")
    shots(page, "alice-creates-cluster")
    form.get_by_role("button", name="Create cluster").click()
    page.wait_for_url(f"{base}/t/{DEMO_TENANT}/clusters/train")
    shots(page, "cluster-provisioning")
    expect(page.locator("#cluster-phase")).to_have_text("Ready", timeout=READY_TIMEOUT_MS)
    shots(page, "cluster-ready")


# The user clicks outside the cluster's status, which then refreshes as its live stream or its
# polling does; resolves once the page settled.
STATUS_REFRESHED = """new Promise((settled) => {
  document.activeElement.blur();
  document.body.addEventListener("htmx:afterSettle", () => settled(true), {once: true});
  htmx.trigger("#cluster-status", "livepoll");
})"""


def take_and_revoke_kubeconfig(page: Page, shots: Screenshots) -> None:
    panel = page.locator("#kubeconfigs")
    panel.get_by_label("Role").select_option("view")
    panel.get_by_role("button", name="Get kubeconfig").click()
    expect(page.get_by_test_id("simulated-kubeconfig-note")).to_be_visible()
    text = page.locator("#kubeconfig-yaml").inner_text()
    assert text.startswith("# SIMULATED HOST")
    assert "server: https://train.demo.simulated-host.invalid" in text
    assert "current-context: demo-train-view-simulated" in text
    shots(page, "kubeconfig-issued")
    active = page.locator("#kubeconfig-grants")
    grants = active.get_by_role("row").filter(has_text="alice@example.com")
    expect(grants).to_have_count(1)
    dialogs: list[str] = []

    def refuse(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", refuse)
    grants.get_by_role("link", name="Revoke…").click()
    confirm = active.get_by_role("row").filter(has_text="Anyone using it loses access")
    expect(confirm).to_contain_text("Revoke the view kubeconfig of alice@example.com?")
    expect(confirm.get_by_role("button", name="Revoke it")).to_be_focused()
    # The status around the panel refreshes by itself (the cluster changed, or the page
    # polls) while the user looks elsewhere: the confirmation stays.
    page.evaluate(STATUS_REFRESHED)
    expect(confirm.get_by_role("button", name="Revoke it")).to_be_visible()
    shots(page, "kubeconfig-revoke-confirm")
    confirm.get_by_role("link", name="Keep it").click()
    expect(grants).to_have_count(1)
    grants.get_by_role("link", name="Revoke…").click()
    active.get_by_role("button", name="Revoke it").click()
    expect(page.locator("#toasts")).to_contain_text(
        "Revoked the view kubeconfig of alice@example.com")
    expect(page.locator("#kubeconfig-grants")).to_have_count(0)
    history = page.locator("#revoked-grants").get_by_role("row").filter(
        has_text="alice@example.com")
    expect(history).to_have_count(1)
    expect(history).to_contain_text("Alice Example")  # who revoked it
    assert dialogs == []  # no browser dialog on the way
    shots(page, "kubeconfig-revoked")


def test_newcomer_journey_from_quota_to_a_revoked_kubeconfig(
    browser: Browser, simulated_portal: SimulatedPortal, screenshots: Screenshots,
) -> None:
    base = simulated_portal.url
    alice = signed_in_page(browser, base, "alice@example.com")
    expect(alice.get_by_test_id("simulated-host-banner")).to_contain_text("Simulated host")
    alice.get_by_role("link", name="Demo Research").click()
    screenshots(alice, "alice-dashboard-empty")
    request_quota(alice, base, screenshots)

    admin = signed_in_page(browser, base, "admin@example.com")
    approve(admin, screenshots)
    dedicate(admin, base, "h100-r1-n1", screenshots)

    alice.reload()
    expect(alice.get_by_role("row").filter(has_text=H100).first).to_contain_text("8")
    screenshots(alice, "alice-dashboard-with-quota")
    create_cluster(alice, base, screenshots)
    take_and_revoke_kubeconfig(alice, screenshots)

    alice.get_by_role("link", name="Audit log").click()
    for action in ("quota_request.approve", "virtual_cluster.ready", "kubeconfig.issue",
                   "kubeconfig.revoke"):
        expect(alice.get_by_role("cell", name=action, exact=True).first).to_be_visible()
    screenshots(alice, "audit-trail")
    audit_log_reads_well(alice, base, screenshots)
    audit_log_filters(admin, base, screenshots)
    alice.goto(f"{base}/t/{DEMO_TENANT}")
    screenshots(alice, "alice-dashboard-with-cluster")


def fits_the_width(page: Page) -> bool:
    """Neither the page nor the audit table scrolls sideways."""
    return bool(page.evaluate("""() => {
        const wrap = document.querySelector('#audit-results .table-wrap');
        const root = document.documentElement;
        return root.scrollWidth <= root.clientWidth && wrap.scrollWidth <= wrap.clientWidth;
    }"""))


def audit_log_reads_well(page: Page, base: str, shots: Screenshots) -> None:
    approved = page.get_by_role("row").filter(
        has=page.get_by_role("cell", name="quota_request.approve", exact=True))
    expect(approved.get_by_role("cell", name=re.compile(
        r"^H100 80GB quota request #\d+ \(demo\)$"))).to_be_visible()
    expect(approved.locator("li[data-field=state]")).to_have_text("state: pending → approved")
    for narrow in (1280, 800):
        page.set_viewport_size({"width": narrow, "height": 900})
        assert fits_the_width(page), f"the audit log runs off the right edge at {narrow} px"
    shots(page, "audit-log-narrow")
    page.set_viewport_size({"width": 1280, "height": 900})


def audit_log_filters(page: Page, base: str, shots: Screenshots) -> None:
    page.goto(f"{base}/audit")
    sign_ins = page.get_by_role("cell", name="auth.sign_in", exact=True)
    expect(sign_ins).to_have_count(0)
    shots(page, "admin-audit-log")
    page.get_by_role("link", name="Show sign-ins").click()
    expect(sign_ins.first).to_be_visible()
    shots(page, "admin-audit-log-with-sign-ins")
    page.get_by_role("link", name="Clear").click()
    page.get_by_label("What").select_option(label="Clusters")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"action=virtual_cluster\."))  # htmx keeps the URL
    actions = page.locator("#audit-rows tr[data-action]")
    expect(actions.first).to_be_visible()
    assert all(a.startswith("virtual_cluster.") for a in actions.evaluate_all(
        "rows => rows.map(r => r.dataset.action)"))
    shots(page, "admin-audit-log-clusters")


SPARE_H100_MAC = "52:54:00:a1:00:03"  # app/devdata/spare-machines.json
MACHINE_TIMEOUT_S = 60.0


def machine_phase_becomes(page: Page, phase: str) -> None:
    """The machine's page, reloaded as a user would, until its phase is ``phase``."""
    shown = page.locator("#machine-phase .badge")
    deadline = time.monotonic() + MACHINE_TIMEOUT_S
    while shown.inner_text() != phase:
        assert time.monotonic() < deadline, (
            f"still {shown.inner_text()!r}, not {phase!r}: "
            f"{page.locator('#machine-conditions').inner_text()}")
        page.wait_for_timeout(500)
        page.reload()


def test_a_spare_machine_registered_on_the_machines_page_joins_as_a_node(
    browser: Browser, simulated_portal: SimulatedPortal, screenshots: Screenshots,
) -> None:
    base = simulated_portal.url
    admin = signed_in_page(browser, base, "admin@example.com")
    admin.get_by_text("Admin", exact=True).click()
    admin.get_by_role("link", name="Bare-metal machines").click()
    expect(admin.locator("#simulated-machines")).to_contain_text(SPARE_H100_MAC[:-1])
    screenshots(admin, "admin-machines")
    form = admin.locator("#machine-form")
    form.get_by_label("Name").fill("spare-3")
    form.get_by_label("BMC address").fill("redfish+https://10.0.4.9/redfish/v1/Systems/1")
    form.get_by_label("BMC user").fill("admin")
    form.get_by_label("BMC password").fill("bmc-pa55word")
    form.get_by_label("Boot MAC address").fill(SPARE_H100_MAC)
    choose_option(form.get_by_label("Expected GPU class"), "H100")
    form.get_by_label("Expected GPUs").fill("8")
    form.get_by_role("button", name="Register machine").click()
    admin.wait_for_url(f"{base}/admin/machines/spare-3")
    screenshots(admin, "machine-registered")
    machine_phase_becomes(admin, "available")  # inspected, in the pool
    screenshots(admin, "machine-available")
    admin.get_by_role("button", name="Provision").click()
    admin.wait_for_url(f"{base}/admin/machines/spare-3")
    machine_phase_becomes(admin, "joined")
    screenshots(admin, "machine-joined")
    admin.locator("#machine-facts").get_by_role("link", name="spare-3").click()
    admin.wait_for_url(f"{base}/admin/nodes/spare-3")
    expect(admin.get_by_role("heading", level=1)).to_contain_text("spare-3")
    admin.get_by_role("link", name="Fleet", exact=True).click()
    expect(admin.get_by_role("row").filter(has_text="spare-3")).to_be_visible()
    screenshots(admin, "fleet-with-the-machine")


def add_viewer(portal: SimulatedPortal, issuer: str, email: str) -> None:
    with portal.database.transaction() as db:
        user = auth_service.user_for_email(db, email)
        demo = db.scalars(select(Tenant).where(Tenant.slug == DEMO_TENANT)).one()
        factories.membership(db, demo, user, "viewer")
    oidc.register_user(issuer, email, name="Vera Viewer", groups=[])


@pytest.mark.parametrize("role", ["member", "viewer"])
def test_members_and_viewers_see_no_create_buttons(
    browser: Browser, simulated_portal: SimulatedPortal, screenshots: Screenshots,
    oidc_issuer: str, role: str,
) -> None:
    base = simulated_portal.url
    if role == "member":
        page = signed_in_page(browser, base, "bob@example.com")
    else:
        add_viewer(simulated_portal, oidc_issuer, "vera@example.com")
        page = sign_in_typed(browser, base, "vera@example.com")
    page.get_by_role("link", name="Demo Research").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Demo Research")
    expect(page.get_by_role("link", name="Request GPU quota")).to_have_count(0)
    expect(page.get_by_role("link", name="Create a cluster")).to_have_count(0)
    screenshots(page, f"{role}-dashboard")
    page.goto(f"{base}/t/{DEMO_TENANT}/clusters")
    expect(page.get_by_role("heading", level=1)).to_contain_text("Clusters")
    expect(page.get_by_role("button", name="Create cluster")).to_have_count(0)
    screenshots(page, f"{role}-clusters")
    answer = page.goto(f"{base}/t/{DEMO_TENANT}/quota-requests/new")
    assert answer is not None and answer.status == 403
    expect(page.get_by_role("heading", level=1)).to_have_text("Forbidden")
    screenshots(page, f"{role}-may-not-request-quota")


def test_another_tenants_pages_answer_404(
    browser: Browser, simulated_portal: SimulatedPortal, screenshots: Screenshots,
) -> None:
    with simulated_portal.database.transaction() as db:
        rival = factories.tenant(db, "rival", display_name="Rival Labs")
        factories.cluster(db, rival, factories.host_cluster(db), "secret-run")
    page = signed_in_page(browser, simulated_portal.url, "alice@example.com")
    for path in ("/t/rival", "/t/rival/clusters", "/t/rival/clusters/secret-run",
                 "/t/rival/quota-requests/new", "/t/rival/clusters/secret-run/kubeconfigs"):
        answer = page.goto(simulated_portal.url + path)
        assert answer is not None and answer.status == 404, path
        expect(page.locator("body")).not_to_contain_text("Rival Labs")
        expect(page.locator("body")).not_to_contain_text("secret-run")
        screenshots(page, "rival" + re.sub(r"[^a-z0-9]+", "-", path.removeprefix("/t/rival")))
