"""Issue 61 in the browser: the request form offers what the fleet can give (whole GPUs, a
share of one GPU, slices per profile; no whole GPUs of a MIG-only class), refuses whole GPUs of
a MIG-only class naming its slices, and slices and shares go from the form through the admin
queue to the dashboard in words."""

from __future__ import annotations

import html
import re

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.quotas.models import QuotaRequest, TenantQuota
from tests import factories
from tests.quotas.units_fleet import SLICES_MESSAGE, UnitsFleet, units_fleet
from tests.support import oidc
from tests.support.tenancy import signed_in_admin_of
from tests.support.web import HTML, csrf_of, htmx


def _signed_in(client: TestClient, db: Session, oidc_issuer: str) -> UnitsFleet:
    fleet = units_fleet(db)
    signed_in_admin_of(client, db, oidc_issuer, fleet.t.acme)
    return fleet


def _options(page: str) -> dict[str, str]:
    select_ = re.search(r'<select name="gpu_class_id".*?</select>', page, re.S)
    assert select_ is not None
    return {value: html.unescape(text) for value, text in
            re.findall(r'<option value="([^"]+)"[^>]*>([^<]*)</option>', select_.group(0))}


def _error_of(page: str, field: str) -> str:
    found = re.search(rf'id="{field}-error"[^>]*>([^<]*)<', page)
    assert found, f"no error slot for {field}"
    return html.unescape(found.group(1).strip())


def test_the_form_offers_only_what_the_fleet_can_give(client: TestClient, db: Session,
                                                      oidc_issuer: str) -> None:
    fleet = _signed_in(client, db, oidc_issuer)
    h100, a100 = fleet.h100.id, fleet.a100.id
    l40s = factories.gpu_class(db, "NVIDIA-L40S", display_name="L40S 48GB")
    factories.node(db, fleet.host, l40s, gpu_count=4)
    db.commit()
    page = client.get("/t/acme/quota-requests/new", headers=HTML).text
    assert _options(page) == {
        # a class offered in whole GPUs alone is named as it always was
        f"{l40s.id}": "L40S 48GB (NVIDIA-L40S)",
        f"{a100}:mig:1g.10gb": "A100 SXM4 80GB (NVIDIA-A100-SXM4-80GB) — 1g.10gb slices",
        f"{a100}:mig:3g.40gb": "A100 SXM4 80GB (NVIDIA-A100-SXM4-80GB) — 3g.40gb slices",
        f"{a100}:mig:7g.80gb": "A100 SXM4 80GB (NVIDIA-A100-SXM4-80GB) — 7g.80gb slices",
        f"{h100}": "H100 80GB (NVIDIA-H100-80GB-HBM3) — whole GPUs",
        f"{h100}:share": "H100 80GB (NVIDIA-H100-80GB-HBM3) — a share of one GPU (steps of "
                         "0.25)",
    }


def test_whole_gpus_of_a_mig_only_class_are_refused_on_the_form(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    fleet = _signed_in(client, db, oidc_issuer)
    csrf = csrf_of(client.get("/t/acme/quota-requests/new", headers=HTML).text)
    sent = client.post("/t/acme/quota-requests", headers=htmx(csrf), data={
        "gpu_class_id": str(fleet.a100.id), "gpus": "2", "reason": "notebooks"})
    assert sent.status_code == 422
    assert _error_of(sent.text, "gpus") == SLICES_MESSAGE
    assert db.scalar(select(QuotaRequest.id)) is None


def test_the_amount_field_follows_the_chosen_offer(client: TestClient, db: Session,
                                                   oidc_issuer: str) -> None:
    fleet = _signed_in(client, db, oidc_issuer)
    csrf = csrf_of(client.get("/t/acme/quota-requests/new", headers=HTML).text)
    checked = client.post("/t/acme/quota-requests/validate",
                          headers={**htmx(csrf), "HX-Trigger-Name": "gpus"},
                          data={"gpu_class_id": f"{fleet.h100.id}:share", "gpus": "0.3",
                                "reason": "inference"})
    assert 'id="gpus-unit">Share of one GPU (steps of 0.25, at most 1)<' in checked.text
    assert 'step="0.25"' in checked.text
    assert _error_of(checked.text, "gpus") == (
        "a share of H100 80GB is asked in steps of 0.25 of a GPU: one of 0.25, 0.5, 0.75, 1")


def test_slices_go_from_the_form_through_the_queue_to_the_dashboard_in_words(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    fleet = _signed_in(client, db, oidc_issuer)
    csrf = csrf_of(client.get("/t/acme/quota-requests/new", headers=HTML).text)
    sent = client.post("/t/acme/quota-requests", headers=htmx(csrf), data={
        "gpu_class_id": f"{fleet.a100.id}:mig:1g.10gb", "gpus": "3", "reason": "notebooks"})
    assert sent.status_code == 200 and sent.headers["HX-Redirect"] == "/t/acme"
    dashboard = html.unescape(client.get("/t/acme", headers=HTML).text)
    assert "3 \u00d7 1g.10gb of A100 SXM4 80GB" in dashboard

    oidc.sign_in(client, "admin@example.com")
    queue = client.get("/admin/quota-requests", headers=HTML).text
    assert "3 \u00d7 1g.10gb of A100 SXM4 80GB" in html.unescape(queue)
    request_id = db.scalars(select(QuotaRequest.id)).one()
    row = client.post(f"/admin/quota-requests/{request_id}/approve",
                      headers=htmx(csrf_of(queue)), data={"slices": "2", "note": ""})
    assert row.status_code == 200, row.text
    assert "2 \u00d7 1g.10gb of A100 SXM4 80GB" in html.unescape(row.text)
    quota = db.scalars(select(TenantQuota)).one()
    assert (quota.unit, quota.mig_profile, quota.amount) == ("mig", "1g.10gb", 2)


def test_a_share_goes_from_the_form_to_the_dashboard_in_words(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    fleet = _signed_in(client, db, oidc_issuer)
    csrf = csrf_of(client.get("/t/acme/quota-requests/new", headers=HTML).text)
    sent = client.post("/t/acme/quota-requests", headers=htmx(csrf), data={
        "gpu_class_id": f"{fleet.h100.id}:share", "gpus": "0.5", "reason": "inference"})
    assert sent.status_code == 200, sent.text
    oidc.sign_in(client, "admin@example.com")
    queue = client.get("/admin/quota-requests", headers=HTML).text
    request_id = db.scalars(select(QuotaRequest.id)).one()
    row = client.post(f"/admin/quota-requests/{request_id}/approve",
                      headers=htmx(csrf_of(queue)), data={"gpu_share": "0.5", "note": ""})
    assert row.status_code == 200, row.text
    signed_in_admin_of(client, db, oidc_issuer, fleet.t.acme)
    dashboard = client.get("/t/acme", headers=HTML).text
    quota_table = re.search(r'<table class="table" id="quota">.*?</table>', dashboard, re.S)
    assert quota_table is not None
    assert '<td class="approved">0.5 of an H100 80GB</td>' in quota_table.group(0)
    assert '<td class="shared-pool-left">0.5 of a GPU</td>' in quota_table.group(0)
