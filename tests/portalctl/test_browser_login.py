"""`portalctl login` through the browser: headless Chromium signs in at the local OIDC provider,
confirms the token on the portal's page, and the portal hands it to portalctl's listener."""

from __future__ import annotations

import json
import re
import secrets
import stat

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.portalctl.conftest import Portal, PortalCtl, sso_user, start_browser_login

pytestmark = pytest.mark.browser
EMAIL = "acme-admin@example.com"


def test_a_tenant_admin_signs_in_through_the_browser_and_the_profile_works(
    portal: Portal, portalctl: PortalCtl, browser: Browser, oidc_issuer: str
) -> None:
    sso_user(portal, oidc_issuer, EMAIL)
    login = start_browser_login(portalctl, portal.url, "--no-browser", "--name", "ci laptop",
                                "--days", "7", "--timeout", "120")
    page = _through_sso(browser, login.link)
    expect(page.locator("#cli-token-name")).to_have_text("ci laptop")
    expect(page.locator("#cli-token-lifetime")).to_have_text("in 7 days")
    page.get_by_role("button", name="Create token and sign in").click()
    expect(page.locator("#portalctl-done")).to_contain_text("portalctl is signed in")
    assert page.url.startswith("http://127.0.0.1:") and "token" not in page.url

    finished = login.finish()
    assert finished.exit_code == 0, finished.stderr
    assert f"as {EMAIL}" in finished.stdout
    config = portalctl.home / ".config" / "portalctl" / "config.toml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    whoami = portalctl("whoami")
    assert whoami.exit_code == 0, whoami.stderr
    assert EMAIL in whoami.stdout and "acme (admin)" in whoami.stdout
    tokens = _json_list(portalctl("tokens", "list", "-o", "json").stdout)
    made = [t for t in tokens if t["name"] == "ci laptop"]
    assert len(made) == 1 and made[0]["scopes"] == ["read", "write"]


def test_an_answer_with_another_state_is_refused_and_nothing_is_saved(
    portal: Portal, portalctl: PortalCtl, browser: Browser, oidc_issuer: str
) -> None:
    sso_user(portal, oidc_issuer, EMAIL)
    login = start_browser_login(portalctl, portal.url, "--no-browser", "--timeout", "120")
    forged = re.sub(r"state=[^&]+", f"state={secrets.token_urlsafe(32)}", login.link)
    page = _through_sso(browser, forged)
    page.get_by_role("button", name="Create token and sign in").click()
    expect(page.locator("#portalctl-done")).to_contain_text("not signed in")

    finished = login.finish()
    assert finished.exit_code == 1
    assert "did not carry this login's state" in finished.stderr
    assert "Traceback" not in finished.stderr
    assert not (portalctl.home / ".config" / "portalctl" / "config.toml").exists()


def test_cancelling_in_the_browser_ends_the_login(
    portal: Portal, portalctl: PortalCtl, browser: Browser, oidc_issuer: str
) -> None:
    sso_user(portal, oidc_issuer, EMAIL)
    login = start_browser_login(portalctl, portal.url, "--no-browser", "--timeout", "120")
    page = _through_sso(browser, login.link)
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("#portalctl-done")).to_contain_text("cancelled")
    finished = login.finish()
    assert finished.exit_code == 1 and "cancelled in the browser" in finished.stderr


def test_a_login_nobody_answers_gives_up_with_a_clear_message(
    portal: Portal, portalctl: PortalCtl
) -> None:
    login = start_browser_login(portalctl, portal.url, "--no-browser", "--timeout", "0.3")
    assert login.link.startswith(f"{portal.url}/cli/login?port=")
    waited = login.finish()
    assert waited.exit_code == 1
    assert "no answer from the browser within 0.3s" in waited.stderr


def _through_sso(browser: Browser, link: str) -> Page:
    """A fresh browser opens the link: the portal sends it to the provider and back."""
    page = browser.new_context().new_page()
    page.goto(link)
    page.locator("input[name='sub']").fill(EMAIL)
    page.get_by_role("button", name="Authorize").click()
    expect(page.locator("#cli-login")).to_be_visible()
    return page


def _json_list(text: str) -> list[dict[str, object]]:
    loaded = json.loads(text)
    assert isinstance(loaded, list)
    return loaded
