"""In a real browser with no way out of loopback: /docs (Swagger UI) and /redoc (ReDoc) show
the API's operations, and the local IdP's sign-in page is styled, all from files the portal
and the provider serve themselves. Screenshots go to test-artifacts/browser/."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Route, expect

from tests.browser.conftest import Screenshots

pytestmark = pytest.mark.browser

LOOPBACK = {"127.0.0.1", "localhost"}


@dataclass
class Offline:
    """A browser context whose requests beyond loopback are refused and recorded."""

    context: BrowserContext
    left: list[str] = field(default_factory=list)
    refused_by_policy: list[str] = field(default_factory=list)

    def page(self) -> Page:
        page = self.context.new_page()
        page.on("console", self._note_policy)
        return page

    def _note_policy(self, message: ConsoleMessage) -> None:
        # ReDoc's footer shows Redocly's logo from their CDN: the policy's img-src keeps it
        # from loading, so that refusal is the point, not a fault.
        if "Content Security Policy" in message.text and "Loading the image" not in message.text:
            self.refused_by_policy.append(message.text)


@pytest.fixture
def offline(browser: Browser) -> Offline:
    context = browser.new_context()
    found = Offline(context)

    def only_loopback(route: Route) -> None:
        if urlsplit(route.request.url).hostname in LOOPBACK:
            route.continue_()
        else:
            found.left.append(route.request.url)
            route.abort()

    context.route("**/*", only_loopback)
    return found


def test_swagger_ui_shows_every_operation_and_how_to_sign_in(
    offline: Offline, live_portal: str, screenshots: Screenshots
) -> None:
    page = offline.page()
    page.goto(live_portal + "/docs")
    clusters = page.locator('.opblock-summary-path[data-path="/api/v1/tenants/{tenant}/clusters"]')
    expect(clusters.first).to_be_visible()
    screenshots(page, "swagger-ui", full_page=False)  # the whole list is 11,000 px tall
    approve = page.locator(".opblock-summary", has_text="Approve a quota request")
    approve.click()
    answers = page.locator(".opblock.is-open .responses-table .response-col_status")
    expect(answers.filter(has_text="409")).to_be_visible()
    assert {"200", "401", "403", "404", "409", "422"} <= set(answers.all_inner_texts())
    screenshots(page, "swagger-ui-approve", full_page=False)
    page.get_by_role("button", name="Authorize").first.click()
    dialog = page.locator(".modal-ux")
    expect(dialog.get_by_text("apiToken (http, Bearer)")).to_be_visible()
    expect(dialog.get_by_text("sessionCookie (apiKey)")).to_be_visible()
    screenshots(page, "swagger-ui-authorize", full_page=False)
    assert offline.left == []
    assert offline.refused_by_policy == []


def test_redoc_shows_the_operations_and_their_errors(
    offline: Offline, live_portal: str, screenshots: Screenshots
) -> None:
    page = offline.page()
    page.goto(live_portal + "/redoc")
    # A 1 MB bundle then the whole document to lay out: more than the default 5 s when busy.
    expect(page.get_by_role("heading", name="Request GPU quota")).to_be_visible()
    approve = page.get_by_role("heading", name="Approve a quota request")
    approve.scroll_into_view_if_needed()
    screenshots(page, "redoc-approve", full_page=False)  # the whole page is 80,000 px tall
    page.get_by_role("textbox", name="Search").fill("kubeconfig")
    results = page.locator("[data-role='search:results']")
    expect(results.get_by_role("menuitem", name="Get a kubeconfig")).to_be_visible()
    assert offline.left == []
    assert offline.refused_by_policy == []


def test_the_local_idps_sign_in_page_is_styled_offline(
    offline: Offline, live_portal: str, screenshots: Screenshots
) -> None:
    page = offline.page()
    page.goto(live_portal + "/")
    page.get_by_role("link", name="Sign in with SSO").click()
    expect(page.locator("button[value='alice@example.com']")).to_be_visible()
    # Its stylesheets are in document.styleSheets once loaded: the button may show before.
    page.wait_for_load_state("load")
    sheets = page.evaluate(
        "() => [...document.styleSheets].filter(s => s.href).map(s => s.cssRules.length)"
    )
    assert sheets
    assert min(sheets) > 100  # the Pico stylesheet loaded, its rules readable
    screenshots(page, "local-idp-sign-in")
    assert offline.left == []
