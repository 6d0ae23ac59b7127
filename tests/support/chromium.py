"""Headless Chromium through Playwright: Debian's chromium, never a downloaded browser."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, expect, sync_playwright

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Without these, Chromium reaches for Google's services, which this closed network refuses.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic"]
# Bounds on a hang, not on speed (benchmarks measure that). Playwright's own (30 s for a page,
# 5 s for an expectation) failed pages that were merely slow: on 2 cores shared by the suite's
# workers, the labs and a second suite, loading a page took over 30 s, an htmx swap over 5 s.
ACTION_TIMEOUT_MS = 120_000
EXPECT_TIMEOUT_MS = 60_000


@contextmanager
def launched() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: `make test` installs Debian's chromium package")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        expect.set_options(timeout=EXPECT_TIMEOUT_MS)
        yield _with_bounds(browser)
        browser.close()


def _with_bounds(browser: Browser) -> Browser:
    """``browser`` whose every new context waits up to ``ACTION_TIMEOUT_MS``."""
    new_context = browser.new_context

    def bounded_context(**options: Any) -> BrowserContext:
        context = new_context(**options)
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        return context

    browser.new_context = bounded_context  # type: ignore[method-assign]
    return browser
