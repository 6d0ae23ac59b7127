"""Issue 58, the burst form: no ceiling is a choice said in words (a "No ceiling" box), never a
-1 typed; what saving would set is said before saving; numbers are refused with their range and
unit; the summary names what was set apart in words; the page explains the three tiers. The
REST API keeps -1 for no ceiling."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.quotas import burst
from app.quotas.models import BurstPolicy
from app.tenants.models import Tenant
from tests import factories
from tests.support import oidc
from tests.support.tenancy import build_tenancy, headers
from tests.support.web import HTML, csrf_of, htmx

FORM = "/admin/tenants/acme/burst-policy"


@pytest.fixture
def acme(db: Session) -> Tenant:
    tenant = factories.tenant(db, "acme")
    db.commit()
    return tenant


def admin_csrf(client: TestClient) -> str:
    oidc.sign_in(client, "admin@example.com")
    return csrf_of(client.get("/t/acme", headers=HTML).text)


def error_of(html: str, slot: str) -> str:
    found = re.search(rf'id="{slot}-error"[^>]*>([^<]*)<', html)
    assert found, f"no error slot {slot}"
    return found.group(1)


def stored(db: Session, tenant: Tenant) -> tuple[str, int | None] | None:
    db.expire_all()
    row = db.get(BurstPolicy, tenant.id)
    return None if row is None else (row.tier, row.burst_gpus)


def test_a_tier_without_a_ceiling_is_refused_until_the_box_says_so(
        client: TestClient, db: Session, acme: Tenant, oidc_issuer: str) -> None:
    csrf = admin_csrf(client)
    unsaid = client.post(FORM, headers=htmx(csrf), data={"tier": "burst"})
    assert unsaid.status_code == 422
    assert error_of(unsaid.text, "burst-gpus") == (
        "the burst tier has no ceiling: tick &#34;No ceiling&#34; to save it so, or give at "
        "most how many GPUs")
    assert stored(db, acme) is None

    said = client.post(FORM, headers=htmx(csrf), data={"tier": "burst", "no_ceiling": "on"})
    assert said.status_code == 200, said.text
    assert "<strong>no ceiling</strong> but the pool" in said.text
    assert stored(db, acme) == ("burst", None)  # the tier's own: no ceiling
    assert re.search(r'name="no_ceiling" value="on" checked', said.text)  # kept on resending


def test_no_ceiling_on_the_guaranteed_tier_is_set_apart_as_the_api_says_it(
        client: TestClient, db: Session, acme: Tenant, oidc_issuer: str) -> None:
    csrf = admin_csrf(client)
    saved = client.post(FORM, headers=htmx(csrf), data={"tier": "guaranteed", "no_ceiling": "on"})
    assert saved.status_code == 200, saved.text
    assert stored(db, acme) == ("guaranteed", burst.UNLIMITED)
    assert "Set apart from the tier: burst ceiling." in saved.text
    assert "burst_gpus" not in re.sub(r'name="burst_gpus"|burst_gpus-error', "", saved.text)


@pytest.mark.parametrize(("typed", "message"), [
    ("-1", "at least 0 GPUs; for no ceiling, tick &#34;No ceiling&#34;"),
    ("100001", "at most 100000 GPUs"),
    ("99999999999999999999999", "at most 100000 GPUs"),
    ("many", "a whole number of GPUs, from 0 to 100000"),
], ids=["minus-one", "over", "huge", "words"])
def test_a_ceiling_out_of_range_says_the_range_in_gpus(
        client: TestClient, db: Session, acme: Tenant, oidc_issuer: str, typed: str,
        message: str) -> None:
    csrf = admin_csrf(client)
    refused = client.post(FORM, headers=htmx(csrf),
                          data={"tier": "guaranteed", "burst_gpus": typed})
    assert refused.status_code == 422
    assert error_of(refused.text, "burst-gpus") == message
    assert error_of(refused.text, "burst-form") == ""  # said once, beside its field
    assert stored(db, acme) is None


def test_a_number_with_the_box_is_refused_as_two_answers(
        client: TestClient, db: Session, acme: Tenant, oidc_issuer: str) -> None:
    csrf = admin_csrf(client)
    refused = client.post(FORM, headers=htmx(csrf),
                          data={"tier": "burst", "burst_gpus": "8", "no_ceiling": "on"})
    assert refused.status_code == 422
    assert error_of(refused.text, "burst-gpus") == "either at most 8 GPUs or no ceiling: not both"


def test_what_saving_would_set_is_said_before_saving_and_nothing_is_saved(
        client: TestClient, db: Session, acme: Tenant, oidc_issuer: str) -> None:
    csrf = admin_csrf(client)
    check = FORM + "/check"
    unlimited = client.post(check, headers=htmx(csrf), data={"tier": "burst", "no_ceiling": "on"})
    effect = re.search(r'<p id="burst-effect" role="status">(.*?)</p>', unlimited.text, re.S)
    assert effect and "Saving sets tier <strong>burst</strong>" in effect.group(1)
    assert "<strong>no ceiling</strong>" in effect.group(1)
    capped = client.post(check, headers=htmx(csrf), data={"tier": "burst", "burst_gpus": "6"})
    assert 'up to <span class="burst-gpus">6</span> idle GPUs' in capped.text
    unsaid = client.post(check, headers=htmx(csrf), data={"tier": "burst"})
    assert "the burst tier has no ceiling" in error_of(unsaid.text, "burst-gpus")
    assert stored(db, acme) is None


def test_the_page_explains_every_tier(
        client: TestClient, db: Session, acme: Tenant, oidc_issuer: str) -> None:
    oidc.sign_in(client, "admin@example.com")
    page = client.get("/t/acme", headers=HTML).text
    tiers = re.search(r'<dl class="note" id="burst-tiers">(.*?)</dl>', page, re.S)
    assert tiers
    for name in burst.TIERS:
        assert f"<dt>{name}</dt><dd>" in tiers.group(1)


def test_the_api_keeps_minus_one_for_no_ceiling(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    chosen = client.put("/api/v1/tenants/acme/burst-policy", headers=headers(db, t.platform_admin),
                        json={"tier": "guaranteed", "burst_gpus": -1})
    assert chosen.status_code == 200, chosen.text
    assert chosen.json()["burst_gpus"] == -1
