"""A live portal on loopback (the embedded SQLite default) driven by headless Chromium (the
``browser`` fixture is the root conftest's: one per run, shared with tests/portalctl)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from app import migrate
from app.config import Settings
from app.db import Database
from app.devmode import seed_demo
from tests.support.serving import serving


def demo_database(directory: Path) -> Database:
    """The embedded default as `portal dev` makes it: an SQLite file with the demo data."""
    url = f"sqlite:///{directory / 'portal.db'}"
    migrate.upgrade(url)
    database = Database(url)
    with database.transaction() as db:
        seed_demo(db)
    return database


@pytest.fixture
def live_portal(tmp_path: Path, settings: Settings) -> Iterator[str]:
    database = demo_database(tmp_path)
    with serving(settings.model_copy(update={"database_url": database.url}), database) as base:
        yield base
    database.dispose()


def signed_in_page(browser: Browser, base: str, email: str) -> Page:
    """A fresh browser profile that signs in through the local OIDC provider's page."""
    page = browser.new_context().new_page()
    page.goto(base + "/")
    page.get_by_role("link", name="Sign in with SSO").click()
    page.locator(f"button[value='{email}']").click()
    page.wait_for_url(base + "/")
    return page
