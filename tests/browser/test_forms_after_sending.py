"""Issue 58 in a real browser: after a form is sent the address is the page shown, reloading
it shows that page again (not an empty form), and focus lands on the result or on the first
field refused, not at the top of the page."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from playwright.sync_api import Browser, Page, expect

from app.process.devmode import DEMO_TENANT, DEMO_TENANT_ADMIN
from tests.browser.conftest import Screenshots, signed_in_page

pytestmark = pytest.mark.browser

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
