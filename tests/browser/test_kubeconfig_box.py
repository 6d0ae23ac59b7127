"""An issued kubeconfig is read whole in its box (issue 58, item 11): the token, one word of
a thousand characters, wraps inside the box instead of running off its side, on a phone and
on a desktop."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from app.process.devmode import DEMO_TENANT, DEMO_TENANT_ADMIN
from tests.browser.conftest import Screenshots, SimulatedPortal, seed_work, sign_in_on

pytestmark = pytest.mark.browser

FITS = """(box) => ({sideways: box.scrollWidth - box.clientWidth,
                    right: box.getBoundingClientRect().right,
                    viewport: document.documentElement.clientWidth,
                    token: box.textContent.includes("token: ")})"""


def test_the_token_line_wraps_inside_its_box(
    browser: Browser, simulated_portal: SimulatedPortal, screenshots: Screenshots,
) -> None:
    seed_work(simulated_portal)
    base = simulated_portal.url
    for width in (390, 1280):
        context = browser.new_context(viewport={"width": width, "height": 900})
        alice = sign_in_on(context, base, DEMO_TENANT_ADMIN)
        alice.goto(f"{base}/t/{DEMO_TENANT}/clusters/train")
        expect(alice.locator("#cluster-phase")).to_have_text("Ready", timeout=60_000)
        alice.get_by_role("button", name="Get kubeconfig").click()
        box = alice.locator("#kubeconfig-yaml")
        expect(box).to_be_visible()
        box.scroll_into_view_if_needed()
        screenshots(alice, f"kubeconfig-{width}", full_page=False)
        fits = box.evaluate(FITS)
        assert fits["token"] and fits["sideways"] <= 0, (width, fits)
        assert fits["right"] <= fits["viewport"], (width, fits)
        context.close()
