"""In a real browser: a platform admin gives a second host its webhook URL on the host page.
An address its API server could not call is refused inline with what was typed kept; a saved
one shows where that host's API server will call (the path names the host); emptying the field
takes it away again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from app.kit.config import Settings
from tests import factories
from tests.browser.conftest import demo_database, signed_in_page
from tests.support.serving import serving

pytestmark = pytest.mark.browser
URL = "https://webhook.gpu-eu-2.example.com:9443"


@pytest.fixture
def portal(tmp_path: Path, settings: Settings) -> Iterator[tuple[str, int]]:
    database = demo_database(tmp_path)
    with database.transaction() as db:
        host_id = factories.host_cluster(db, "gpu-eu-2", region="eu-2").id
    with serving(settings.model_copy(update={"database_url": database.url}), database) as base:
        yield base, host_id
    database.dispose()


def _save_webhook_url(page: Page, value: str) -> None:
    form = page.locator("#host-settings")
    form.locator("input[name=webhook_url]").fill(value)
    with page.expect_navigation():
        form.get_by_role("button", name="Save").click()


def test_an_admin_sets_and_clears_a_hosts_webhook_url(
        browser: Browser, portal: tuple[str, int]) -> None:
    base, host_id = portal
    page = signed_in_page(browser, base, "admin@example.com")
    page.goto(base + "/admin/hosts/gpu-eu-2")
    webhook = page.locator("#host-webhook")
    expect(webhook).to_contain_text("none: set a webhook URL below")

    _save_webhook_url(page, "http://webhook.gpu-eu-2.example.com:9443")
    expect(page.locator("#webhook_url-error")).to_contain_text("https://")
    expect(page.locator("input[name=webhook_url]")).to_have_value(
        "http://webhook.gpu-eu-2.example.com:9443")
    expect(webhook).to_contain_text("none")

    _save_webhook_url(page, URL)
    expect(webhook).to_have_text(f"{URL}/mutate-pods/hosts/{host_id}")
    page.reload()
    expect(page.locator("input[name=webhook_url]")).to_have_value(URL)

    _save_webhook_url(page, "")
    expect(webhook).to_contain_text("none: set a webhook URL below")
    expect(page.locator("input[name=webhook_url]")).to_have_value("")
