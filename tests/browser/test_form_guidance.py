"""Issue 29 in a real browser: the create form tells the quota left per class; a NUL or an
over-long name comes back inside the form in the portal's words, never cut and never as raw
problem+json; a long name stays inside the table; bob is offered only the scopes he can hold."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import select

from app.gpu_classes.models import GpuClass
from app.kit.config import Settings
from app.quotas.models import TenantQuota
from app.tenants.models import Tenant
from tests.browser.conftest import Screenshots, demo_database, signed_in_page
from tests.support.serving import serving

pytestmark = pytest.mark.browser


@pytest.fixture
def portal_with_quota(tmp_path: Path, settings: Settings) -> Iterator[str]:
    """The demo portal where tenant demo holds 8 H100s, and an L40S class it has none of."""
    database = demo_database(tmp_path)
    with database.transaction() as db:
        demo = db.scalars(select(Tenant).where(Tenant.slug == "demo")).one()
        h100 = db.scalars(select(GpuClass)).one()
        db.add(TenantQuota(tenant_id=demo.id, gpu_class_id=h100.id, gpus=8, region="dev"))
        db.add(GpuClass(product="NVIDIA-L40S", display_name="L40S", memory_mib=46068,
                        declared_by_admin=True))
    with serving(settings.model_copy(update={"database_url": database.url}), database) as base:
        yield base
    database.dispose()


def _create(page: Page, name: str, gpus: str) -> None:
    form = page.locator("#cluster-form")
    form.locator("input[name=name]").fill(name)
    form.locator("select[name=gpu_class_id]").select_option(index=1)
    form.locator("input[name=gpus]").fill(gpus)
    page.get_by_role("button", name="Create cluster").click()


def test_the_create_form_shows_the_quota_left_per_class(
    browser: Browser, portal_with_quota: str, screenshots: Screenshots
) -> None:
    alice = signed_in_page(browser, portal_with_quota, "alice@example.com")
    alice.goto(portal_with_quota + "/t/demo/clusters")
    options = alice.locator("#cluster-form select[name=gpu_class_id] option")
    expect(options).to_have_text(["No GPUs", "H100 80GB (NVIDIA-H100-80GB-HBM3): 8 of 8 GPUs left"])
    _create(alice, "train", "3")
    alice.wait_for_url(portal_with_quota + "/t/demo/clusters/train")
    alice.goto(portal_with_quota + "/t/demo/clusters")
    expect(alice.locator("#quota-left")).to_contain_text("H100 80GB: 5 of 8 GPUs left")
    screenshots(alice, "quota-left-per-class")


def test_a_nul_in_the_name_comes_back_inside_the_form_with_what_was_typed(
    browser: Browser, portal_with_quota: str, screenshots: Screenshots
) -> None:
    alice = signed_in_page(browser, portal_with_quota, "alice@example.com")
    alice.goto(portal_with_quota + "/t/demo/clusters")
    _create(alice, "in\x00fer", "3")
    form = alice.locator("#cluster-form")
    expect(alice.locator("#name-error")).to_contain_text("holds a control character")
    expect(form.locator("input[name=gpus]")).to_have_value("3")
    expect(form.locator("select[name=gpu_class_id]")).to_have_value(
        form.locator("select[name=gpu_class_id] option").nth(1).get_attribute("value") or "")
    expect(alice.locator("body")).not_to_contain_text("problems/validation-failed")
    screenshots(alice, "nul-in-the-name")


def test_a_long_name_is_refused_not_cut_and_stays_inside_the_table(
    browser: Browser, portal_with_quota: str, screenshots: Screenshots
) -> None:
    alice = signed_in_page(browser, portal_with_quota, "alice@example.com")
    alice.set_viewport_size({"width": 1000, "height": 800})
    alice.goto(portal_with_quota + "/t/demo/clusters")
    too_long = "a-name-nobody-would-want-to-type-twice-really"  # 45 characters
    _create(alice, too_long, "1")
    expect(alice.locator("#name-error")).to_have_text("at most 40 characters (this one has 45)")
    expect(alice.locator("#cluster-form input[name=name]")).to_have_value(too_long)
    screenshots(alice, "name-too-long")

    longest = too_long[:40].rstrip("-")
    _create(alice, longest, "1")
    alice.wait_for_url(f"{portal_with_quota}/t/demo/clusters/{longest}")
    alice.goto(portal_with_quota + "/t/demo/clusters")
    link = alice.locator(f"#clusters a[title='{longest}']")
    expect(link).to_have_text(longest)
    state = alice.locator("#clusters th", has_text="State").bounding_box()
    frame = alice.locator(".table-wrap").first.bounding_box()
    assert state is not None and frame is not None
    assert state["x"] + state["width"] <= frame["x"] + frame["width"] + 1
    screenshots(alice, "long-name-in-the-table")


def test_the_tokens_page_offers_only_the_scopes_the_user_can_hold(
    browser: Browser, portal_with_quota: str, screenshots: Screenshots
) -> None:
    bob = signed_in_page(browser, portal_with_quota, "bob@example.com")
    bob.goto(portal_with_quota + "/tokens")
    scopes = bob.locator("input[name=scopes]")
    expect(scopes).to_have_count(2)
    assert [scopes.nth(i).get_attribute("value") for i in range(2)] == ["read", "write"]
    screenshots(bob, "member-scopes")
    admin = signed_in_page(browser, portal_with_quota, "admin@example.com")
    admin.goto(portal_with_quota + "/tokens")
    expect(admin.locator("input[name=scopes][value=admin]")).to_have_count(1)


def test_bob_sees_whom_to_ask_instead_of_the_create_form(
    browser: Browser, portal_with_quota: str, screenshots: Screenshots
) -> None:
    bob = signed_in_page(browser, portal_with_quota, "bob@example.com")
    bob.goto(portal_with_quota + "/t/demo/clusters")
    expect(bob.locator("#cluster-form")).to_have_count(0)
    expect(bob.locator("#who-to-ask")).to_contain_text("alice@example.com")
    screenshots(bob, "whom-to-ask")
