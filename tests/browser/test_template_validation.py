"""In a real browser: Validate queues a template validation, the page says it is pending, and
the worker's result appears by itself (the page polls), without a reload."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from app.database.core import Database
from app.kit.config import Settings
from app.reconcilers.template_validation import TemplateValidator
from tests import factories
from tests.browser.conftest import demo_database, signed_in_page
from tests.support.drive import run_due
from tests.support.kube import InMemoryConnector
from tests.support.serving import serving
from tests.templates.support import StandinCharts

pytestmark = pytest.mark.browser


@pytest.fixture
def portal(tmp_path: Path, settings: Settings) -> Iterator[tuple[str, Database, Settings]]:
    database = demo_database(tmp_path)
    with database.transaction() as db:
        factories.template_version(db, factories.cluster_template(db, "training"), 1,
                                   state="draft")
    served = settings.model_copy(update={"database_url": database.url})
    with serving(served, database) as base:
        yield base, database, served
    database.dispose()


def test_the_validation_result_arrives_by_itself(
        browser: Browser, portal: tuple[str, Database, Settings]) -> None:
    base, database, settings = portal
    page = signed_in_page(browser, base, "admin@example.com")
    page.goto(base + "/admin/cluster-templates/training")
    expect(page.locator("#validation-v1")).to_contain_text("Not validated yet.")
    page.locator("#v1").get_by_role("button", name="Validate").click()
    expect(page.locator("#validation-v1 .validation-pending")).to_be_visible()
    page.evaluate("window.__notReloaded = true")

    # The worker (no host cluster here: the host checks fail, and say so).
    run_due(TemplateValidator(settings, database, InMemoryConnector(None), StandinCharts()),
            "worker-1")
    expect(page.locator("#validation-v1 .validation-failed")).to_be_visible()
    expect(page.locator("#validation-v1")).to_contain_text("no host cluster is configured")
    expect(page.locator("#validation-v1 .validation-pending")).to_have_count(0)
    assert page.evaluate("window.__notReloaded === true")
