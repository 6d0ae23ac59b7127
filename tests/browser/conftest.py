"""A live portal on loopback (the embedded SQLite default) driven by headless Chromium (the
``browser`` fixture is the root conftest's: one per run, shared with tests/portalctl)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page
from sqlalchemy import select

from app.auth import service as auth_service
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.kit.config import Settings
from app.process.devmode import DEMO_TENANT, DEMO_TENANT_ADMIN
from app.tenants.models import Tenant
from tests import factories
from tests.support.browser_events import BrowserEvents, watched
from tests.support.dev_portal import SimulatedPortal, demo_database, serving_simulated_portal
from tests.support.paths import ROOT
from tests.support.serving import serving

__all__ = ["SimulatedPortal", "demo_database"]  # the browser tests import them from here


@pytest.fixture(autouse=True)
def browser_events(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> BrowserEvents:
    """What the test's browser contexts saw, told when it fails (pytest_runtest_makereport)."""
    events = BrowserEvents()
    if "browser" in request.fixturenames:
        browser: Browser = request.getfixturevalue("browser")
        monkeypatch.setattr(browser, "new_context", watched(browser, events))
    return events


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    events = getattr(item, "funcargs", {}).get("browser_events")
    if report.when == "call" and report.failed and isinstance(events, BrowserEvents):
        report.sections.append(("what the browser saw", events.report()))
    return report


@pytest.fixture
def live_portal(tmp_path: Path, settings: Settings) -> Iterator[str]:
    database = demo_database(tmp_path)
    with serving(settings.model_copy(update={"database_url": database.url}), database) as base:
        yield base
    database.dispose()


@pytest.fixture
def simulated_portal(tmp_path: Path, settings: Settings) -> Iterator[SimulatedPortal]:
    """`portal dev` as a newcomer runs it (tests/support/dev_portal.py)."""
    with serving_simulated_portal(tmp_path, settings) as portal:
        yield portal


H100 = "NVIDIA-H100-80GB-HBM3"


def seed_work(portal: SimulatedPortal) -> None:
    """Approved quota, a pending request and a cluster, so that pages show tables, not blanks."""
    with portal.database.transaction() as db:
        demo = db.scalars(select(Tenant).where(Tenant.slug == DEMO_TENANT)).one()
        h100 = db.scalars(select(GpuClass).where(GpuClass.product == H100)).one()
        alice = auth_service.user_for_email(db, DEMO_TENANT_ADMIN)
        factories.quota(db, demo, h100, 8)
        factories.quota_request(db, demo, h100, alice, gpus=4)
        host = db.scalars(select(HostCluster).where(HostCluster.is_default)).one()
        factories.cluster(db, demo, host, "train",
                          gpu_class_id=h100.id, gpus=4)


class Screenshots:
    """Numbered full-page screenshots of one test, under PORTAL_TEST_ARTIFACTS (default
    ``test-artifacts/`` at the repository root)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.taken: list[Path] = []

    def __call__(self, page: Page, name: str, *, full_page: bool = True) -> Path:
        path = self.folder / f"{len(self.taken) + 1:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=full_page)
        self.taken.append(path)
        return path


@pytest.fixture
def screenshots(request: pytest.FixtureRequest) -> Screenshots:
    root = Path(os.environ.get("PORTAL_TEST_ARTIFACTS") or ROOT / "test-artifacts")
    folder = root / "browser" / request.node.name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return Screenshots(folder)


def sign_in_typed(browser: Browser, base: str, email: str) -> Page:
    """Signs in a user the provider was told about at run time (typed in, not a button)."""
    page = browser.new_context().new_page()
    page.goto(base + "/")
    page.get_by_role("link", name="Sign in with SSO").click()
    page.locator("input[name=sub]").fill(email)
    page.get_by_role("button", name="Authorize").click()
    page.wait_for_url(base + "/")
    return page


def signed_in_page(browser: Browser, base: str, email: str) -> Page:
    """A fresh browser profile that signs in through the local OIDC provider's page."""
    return sign_in_on(browser.new_context(), base, email)


def sign_in_on(context: BrowserContext, base: str, email: str) -> Page:
    """Signs a demo user in on a new page of ``context``."""
    page = context.new_page()
    page.goto(base + "/")
    page.get_by_role("link", name="Sign in with SSO").click()
    page.locator(f"button[value='{email}']").click()
    page.wait_for_url(base + "/")
    return page
