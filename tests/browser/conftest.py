"""A live portal on loopback (the embedded SQLite default) driven by headless Chromium."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from playwright.sync_api import Browser, Page, sync_playwright

from app import migrate
from app.config import Settings
from app.db import Database
from app.devmode import seed_demo
from app.kube.connector import KubeConnector
from app.main import create_app
from app.reconcilers.registry import build_worker
from tests.support.web import free_port

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Without these, Chromium reaches for Google's services, which this closed network refuses.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic"]




def demo_database(directory: Path) -> Database:
    """The embedded default as `portal dev` makes it: an SQLite file with the demo data."""
    url = f"sqlite:///{directory / 'portal.db'}"
    migrate.upgrade(url)
    database = Database(url)
    with database.transaction() as db:
        seed_demo(db)
    return database


@contextmanager
def serving(settings: Settings, database: Database, kube: KubeConnector | None = None,
            *, with_worker: bool = False) -> Iterator[str]:
    """The portal on a free loopback port (and its worker, when asked); yields the base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings, database, kube),
                                           host="127.0.0.1", port=port, log_level="warning"))
    threads = [threading.Thread(target=server.run, daemon=True)]
    worker = build_worker(settings, database, kube) if with_worker else None
    if worker is not None:
        threads.append(threading.Thread(target=worker.run, daemon=True))
    for thread in threads:
        thread.start()
    base = f"http://127.0.0.1:{port}"
    _wait_until_up(base)
    try:
        yield base
    finally:
        server.should_exit = True
        if worker is not None:
            worker.stop()
        for thread in threads:
            thread.join(10)


def _wait_until_up(base: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{base}/healthz")
            return
        except httpx.TransportError:
            time.sleep(0.1)


@pytest.fixture
def live_portal(tmp_path: Path, settings: Settings) -> Iterator[str]:
    database = demo_database(tmp_path)
    with serving(settings.model_copy(update={"database_url": database.url}), database) as base:
        yield base
    database.dispose()


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: `make test` installs Debian's chromium package")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def signed_in_page(browser: Browser, base: str, email: str) -> Page:
    """A fresh browser profile that signs in through the local OIDC provider's page."""
    page = browser.new_context().new_page()
    page.goto(base + "/")
    page.get_by_role("link", name="Sign in with SSO").click()
    page.locator(f"button[value='{email}']").click()
    page.wait_for_url(base + "/")
    return page
