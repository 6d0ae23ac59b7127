"""Issue 58 in a real browser: after a form is sent the address is the page shown, reloading
it shows that page again (not an empty form), and focus lands on the result or on the first
field refused, not at the top of the page; revoking a kubeconfig leaves the one just issued,
shown once, where it is."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import select

from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.kit.config import Settings
from app.process.devmode import DEMO_TENANT, DEMO_TENANT_ADMIN
from app.tenants.models import Tenant
from tests import factories
from tests.browser.conftest import Screenshots, SimulatedPortal, demo_database, signed_in_page
from tests.support.serving import serving

pytestmark = pytest.mark.browser

H100 = "NVIDIA-H100-80GB-HBM3"
READY_TIMEOUT_MS = 60_000
FOCUSED_ID = "document.activeElement && document.activeElement.id"


def fill_quota_request(page: Page, reason: str) -> None:
    form = page.locator("#quota-request-form")
    form.get_by_label("GPU class").select_option(index=1)
    form.get_by_role("spinbutton", name="GPUs", exact=True).fill("4")
    form.get_by_label("Reason").fill(reason)


def test_a_sent_quota_request_lands_on_the_dashboard_with_focus_on_it(
    browser: Browser, live_portal: str, screenshots: Screenshots
) -> None:
    alice = signed_in_page(browser, live_portal, DEMO_TENANT_ADMIN)
    alice.goto(f"{live_portal}/t/{DEMO_TENANT}/quota-requests/new")
    fill_quota_request(alice, "evaluation sweep")
    alice.get_by_role("button", name="Send request").click()
    alice.wait_for_url(f"{live_portal}/t/{DEMO_TENANT}")
    row = alice.locator("#quota-requests tr", has_text="evaluation sweep")
    expect(row).to_be_focused()
    screenshots(alice, "request-sent-focus-on-it")
    alice.reload()
    expect(alice.locator("#quota-request-form")).to_have_count(0)
    expect(row).to_be_visible()


def test_a_refused_quota_request_stays_with_focus_on_the_first_refused_field(
    browser: Browser, live_portal: str, screenshots: Screenshots
) -> None:
    alice = signed_in_page(browser, live_portal, DEMO_TENANT_ADMIN)
    new = f"{live_portal}/t/{DEMO_TENANT}/quota-requests/new"
    alice.goto(new)
    fill_quota_request(alice, "a run that ended last year")
    alice.get_by_label("Until").fill((date.today() - timedelta(days=400)).isoformat())
    alice.get_by_role("button", name="Send request").click()
    expect(alice.locator("#ends_at-error")).not_to_be_empty()
    expect(alice.get_by_label("Until")).to_be_focused()
    assert alice.url == new
    screenshots(alice, "request-refused-focus-on-the-field")


@pytest.fixture
def ready_cluster(simulated_portal: SimulatedPortal) -> str:
    """Cluster ``train`` of the demo tenant, brought up by the simulated host's worker."""
    with simulated_portal.database.transaction() as db:
        demo = db.scalars(select(Tenant).where(Tenant.slug == DEMO_TENANT)).one()
        h100 = db.scalars(select(GpuClass).where(GpuClass.product == H100)).one()
        host = db.scalars(select(HostCluster).where(HostCluster.is_default)).one()
        factories.quota(db, demo, h100, 8)
        factories.cluster(db, demo, host, "train", gpu_class_id=h100.id, gpus=2)
    return f"{simulated_portal.url}/t/{DEMO_TENANT}/clusters/train"


def get_kubeconfig(page: Page, role: str) -> str:
    panel = page.locator("#kubeconfigs")
    panel.get_by_label("Role").select_option(role)
    panel.get_by_role("button", name="Get kubeconfig").click()
    expect(page.locator("#issued-kubeconfig")).to_contain_text(f"Your {role} kubeconfig")
    return page.locator("#kubeconfig-yaml").inner_text()


def test_revoking_another_kubeconfig_keeps_the_one_just_issued(
    browser: Browser, simulated_portal: SimulatedPortal, ready_cluster: str,
    screenshots: Screenshots,
) -> None:
    alice = signed_in_page(browser, simulated_portal.url, DEMO_TENANT_ADMIN)
    alice.goto(ready_cluster)
    expect(alice.locator("#cluster-phase")).to_have_text("Ready", timeout=READY_TIMEOUT_MS)
    get_kubeconfig(alice, "view")
    issued = get_kubeconfig(alice, "edit")
    expect(alice.locator("#issued-kubeconfig")).to_be_focused()

    older = alice.locator("#kubeconfig-grants tr", has_text="view")
    older.get_by_role("link", name="Revoke…").click()
    alice.get_by_role("button", name="Revoke it").click()
    expect(alice.locator("#toasts")).to_contain_text("Revoked the view kubeconfig")
    expect(alice.locator("#kubeconfig-yaml")).to_have_text(issued)
    revoked = alice.locator("#revoked-grants tr", has_text="view")
    expect(revoked).to_be_focused()
    expect(alice.locator("#kubeconfig-grants tr", has_text="edit")).to_be_visible()
    screenshots(alice, "revoked-another-kubeconfig-kept")


def test_the_burst_form_says_no_ceiling_before_saving_and_focuses_what_it_set(
    browser: Browser, live_portal: str, screenshots: Screenshots
) -> None:
    admin = signed_in_page(browser, live_portal, "admin@example.com")
    admin.goto(f"{live_portal}/t/{DEMO_TENANT}")
    form = admin.locator("#burst-form")
    form.locator("select[name=tier]").select_option("burst")
    expect(admin.locator("#burst-gpus-error")).to_contain_text("the burst tier has no ceiling")
    form.get_by_role("checkbox", name="No ceiling").check()
    expect(admin.locator("#burst-effect")).to_contain_text("no ceiling but the pool")
    screenshots(admin, "burst-no-ceiling-said-before-saving")
    assert admin.locator("#burst-summary .burst-tier").inner_text() == "guaranteed"  # unsaved

    form.get_by_role("textbox", name="Burst ceiling").fill("-1")
    form.get_by_role("checkbox", name="No ceiling").uncheck()
    form.get_by_role("button", name="Set burst").click()
    expect(admin.locator("#burst-gpus-error")).to_contain_text("at least 0 GPUs")
    expect(admin.get_by_role("textbox", name="Burst ceiling")).to_be_focused()

    admin.get_by_role("textbox", name="Burst ceiling").fill("6")
    admin.locator("#burst-form").get_by_role("button", name="Set burst").click()
    expect(admin.locator("#burst-summary")).to_contain_text("up to 6 idle GPUs")
    expect(admin.locator("#burst-summary")).to_be_focused()
    assert admin.url == f"{live_portal}/t/{DEMO_TENANT}"
    screenshots(admin, "burst-set")


@pytest.fixture
def portal_with_a_cluster(tmp_path: Path, settings: Settings) -> Iterator[str]:
    """The demo portal with cluster ``train`` of the demo tenant (no worker: it stays as
    made); yields the cluster page's address."""
    database = demo_database(tmp_path)
    with database.transaction() as db:
        demo = db.scalars(select(Tenant).where(Tenant.slug == DEMO_TENANT)).one()
        host = db.scalars(select(HostCluster).where(HostCluster.is_default)).one()
        factories.cluster(db, demo, host, "train")
    with serving(settings.model_copy(update={"database_url": database.url}), database) as base:
        yield f"{base}/t/{DEMO_TENANT}/clusters/train"
    database.dispose()


def test_a_schedule_that_sleeps_the_cluster_now_says_so_before_saving(
    browser: Browser, portal_with_a_cluster: str, screenshots: Screenshots
) -> None:
    base = portal_with_a_cluster.split("/t/")[0]
    alice = signed_in_page(browser, base, DEMO_TENANT_ADMIN)
    alice.goto(portal_with_a_cluster)
    form = alice.locator("#sleep-policy-form")
    never = form.get_by_role("checkbox", name="Never sleep by itself")
    label = form.locator("label", has=alice.locator("input[name=never_sleep]")).bounding_box()
    box = never.bounding_box()
    assert label is not None and box is not None
    assert box["x"] - label["x"] < 16 and label["height"] < 2 * box["height"] + 8, (
        "the checkbox sits beside its words, on their line")

    form.get_by_role("textbox", name="Asleep on this schedule").fill("daily")
    form.get_by_role("textbox", name="Time zone of the schedule").fill("UTC")
    form.get_by_role("textbox", name="Time zone of the schedule").press("Tab")
    expect(alice.locator("#sleep-policy-effect")).to_contain_text(
        "Saving this puts the cluster to sleep at once")
    screenshots(alice, "sleep-now-said-before-saving")
    form.get_by_role("button", name="Save sleep policy").click()
    sleep_now = alice.get_by_role("checkbox", name="Put it to sleep now")
    expect(sleep_now).to_be_focused()
    expect(alice.locator("#sleep-policy-summary")).to_contain_text("none: it sleeps only when")

    sleep_now.check()
    alice.get_by_role("button", name="Save sleep policy").click()
    alice.wait_for_url(portal_with_a_cluster)
    expect(alice.locator("#sleep-policy-summary")).to_contain_text("asleep daily (UTC).")
    expect(alice.locator("#sleep-policy-summary")).to_be_focused()
    screenshots(alice, "sleep-policy-saved")
