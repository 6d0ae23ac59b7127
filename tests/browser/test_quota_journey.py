"""The quota loop in a real browser: a tenant admin asks, a platform admin approves part."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Route, expect

from tests.browser.conftest import signed_in_page

pytestmark = pytest.mark.browser


def test_sign_in_lands_on_the_tenants_dashboard(browser: Browser, live_portal: str) -> None:
    page = signed_in_page(browser, live_portal, "alice@example.com")
    expect(page.locator("header")).to_contain_text("Alice Example")
    page.get_by_role("link", name="Demo Research").click()
    expect(page.locator("h1")).to_contain_text("Demo Research")


def test_request_eight_approve_six_dashboard_shows_six(browser: Browser, live_portal: str) -> None:
    tenant_admin = signed_in_page(browser, live_portal, "alice@example.com")
    tenant_admin.goto(live_portal + "/t/demo/quota-requests/new")
    form = tenant_admin.locator("#quota-request-form")
    h100 = "H100 80GB (NVIDIA-H100-80GB-HBM3)"
    form.locator("select[name=gpu_class_id]").select_option(label=h100)
    form = tenant_admin.locator("#quota-request-form")
    form.locator("input[name=gpus]").fill("0")
    form.locator("input[name=gpus]").dispatch_event("change")
    expect(tenant_admin.locator("#gpus-error")).to_have_text("at least 1")
    tenant_admin.locator("input[name=gpus]").fill("8")
    tenant_admin.locator("input[name=gpus]").dispatch_event("change")
    expect(tenant_admin.locator("#gpus-error")).to_be_empty()
    tenant_admin.locator("textarea[name=reason]").fill("fine-tuning run for Q1")
    tenant_admin.get_by_role("button", name="Send request").click()
    tenant_admin.wait_for_url(live_portal + "/t/demo")
    expect(tenant_admin.locator("body")).to_contain_text("fine-tuning run for Q1")

    platform_admin = signed_in_page(browser, live_portal, "admin@example.com")
    platform_admin.goto(live_portal + "/admin/quota-requests")
    row = platform_admin.locator("tr", has_text="fine-tuning run for Q1")
    row.locator("input[name=gpus]").fill("6")
    row.locator("input[name=note]").first.fill("6 now, more next month")
    row.locator("input[name=overcommit]").check()
    row.get_by_role("button", name="Approve").click()
    expect(platform_admin.locator("tr", has_text="fine-tuning run for Q1")).to_contain_text(
        "approved")

    tenant_admin.goto(live_portal + "/t/demo")
    quota_row = tenant_admin.locator("tr", has_text="NVIDIA-H100-80GB-HBM3").first
    expect(quota_row).to_contain_text("6")


def test_a_change_made_while_the_form_is_being_checked_is_checked_too(
        browser: Browser, live_portal: str) -> None:
    """On a loaded server the class's check was still running when the GPUs were typed: that
    second check was dropped, and "at least 1" never came. The newer check now replaces it."""
    page = signed_in_page(browser, live_portal, "alice@example.com")
    held: list[Route] = []

    def hold_the_first_check(route: Route) -> None:
        if held:
            route.continue_()
        else:
            held.append(route)

    page.route("**/quota-requests/validate", hold_the_first_check)
    page.goto(live_portal + "/t/demo/quota-requests/new")
    form = page.locator("#quota-request-form")
    with page.expect_request("**/quota-requests/validate"):
        form.locator("select[name=gpu_class_id]").select_option(
            label="H100 80GB (NVIDIA-H100-80GB-HBM3)")
    form.locator("input[name=gpus]").fill("0")
    form.locator("input[name=gpus]").dispatch_event("change")
    expect(page.locator("#gpus-error")).to_have_text("at least 1")
