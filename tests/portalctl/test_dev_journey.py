"""The README's command-line journey on what `make run` runs (`portal dev`: the demo SQLite
file, the simulated host, the worker converging): alice signs in through the browser, asks
for quota, the admin approves it from the queue of every tenant, alice creates a cluster and
waits for it, takes a kubeconfig to a file and revokes it, and the audit log says so
(docs/journey.md lists the steps and names this test)."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.sync_api import Browser, expect

from app.kit.config import Settings
from app.process.devmode import DEMO_ADMIN, DEMO_TENANT_ADMIN
from tests.portalctl.conftest import PortalCtl, Result, start_browser_login
from tests.support.dev_portal import SimulatedPortal, serving_simulated_portal

pytestmark = pytest.mark.browser


@pytest.fixture
def dev_portal(tmp_path: Path, settings: Settings) -> Iterator[SimulatedPortal]:
    with serving_simulated_portal(tmp_path, settings) as portal:
        yield portal


def browser_login(portalctl: PortalCtl, browser: Browser, url: str, email: str,
                  *options: str) -> Result:
    """`portalctl [options] login --url URL` as a newcomer runs it: the link opened in a
    browser, the persona chosen at the local provider, the token confirmed on the portal's
    page."""
    login = start_browser_login(portalctl, url, "--no-browser", "--timeout", "120",
                                options=options)
    page = browser.new_context().new_page()
    page.goto(login.link)
    page.locator(f"button[value='{email}']").click()
    page.get_by_role("button", name="Create token and sign in").click()
    expect(page.locator("#portalctl-done")).to_contain_text("portalctl is signed in")
    return login.finish()


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.stderr
    return result


def as_json(result: Result) -> Any:
    return json.loads(ok(result).stdout)


def test_the_cli_journey_from_login_to_a_revoked_kubeconfig_on_the_dev_portal(
    dev_portal: SimulatedPortal, portalctl: PortalCtl, browser: Browser, tmp_path: Path,
) -> None:
    url = dev_portal.url
    for email, options in ((DEMO_TENANT_ADMIN, ()), (DEMO_ADMIN, ("--profile", "admin"))):
        signed_in = ok(browser_login(portalctl, browser, url, email, *options))
        assert f"as {email}" in signed_in.stdout
    alice = portalctl
    assert "demo (admin)" in ok(alice("whoami")).stdout

    def admin(*args: str) -> Result:
        return portalctl("--profile", "admin", *args)

    asked = as_json(alice("quota", "request", "--gpu-class", "h100", "--gpus", "8",
                          "--reason", "first fine-tuning run", "-o", "json"))
    assert (asked["state"], asked["gpus"]) == ("pending", 8)
    queue = as_json(admin("quota", "requests", "-o", "json"))
    assert [(r["id"], r["tenant"]) for r in queue] == [(asked["id"], "demo")]
    approved = as_json(admin("quota", "approve", str(asked["id"]), "-o", "json"))
    assert approved["state"] == "approved"
    quota = as_json(alice("quota", "show", "demo", "-o", "json"))
    assert [q["approved_gpus"] for q in quota if q["gpu_class_id"] == asked["gpu_class_id"]] == [8]

    created = ok(alice("clusters", "create", "infer", "--gpu-class", "h100", "--gpus", "8",
                       "--wait", "--timeout", "120", "--poll", "0.5"))
    assert "Ready=True" in created.stderr, created.stderr
    assert "Ready" in created.stdout
    assert as_json(alice("clusters", "show", "infer", "-o", "json"))["phase"] == "Ready"

    saved = tmp_path / "infer.kubeconfig"
    ok(alice("kubeconfig", "infer", "-f", str(saved)))
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    text = saved.read_text()
    assert text.startswith("# SIMULATED HOST")
    config = yaml.safe_load(text)
    assert config["current-context"] == "demo-infer-view-simulated"
    assert config["clusters"][0]["cluster"]["server"] == (
        "https://infer.demo.simulated-host.invalid")
    grants = as_json(alice("grants", "list", "infer", "-o", "json"))
    assert len(grants) == 1 and grants[0]["role"] == "view"
    revoked = ok(alice("grants", "revoke", str(grants[0]["id"])))
    assert f"Grant {grants[0]['id']} revoked." in revoked.stdout
    assert as_json(alice("grants", "list", "infer", "-o", "json")) == []

    actions = {event["action"] for event in as_json(alice("audit", "--tenant", "demo",
                                                          "-o", "json"))}
    assert {"quota_request.create", "quota_request.approve", "virtual_cluster.create",
            "virtual_cluster.ready", "kubeconfig.issue", "kubeconfig.revoke"} <= actions
