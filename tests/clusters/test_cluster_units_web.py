"""Issue 61 in the browser: a tenant admin creates a cluster of MIG slices and one of a share
of one GPU from the create form, whose class options say what is left of each unit in words;
the cluster page and list say the grant; the resize form speaks the cluster's unit."""

from __future__ import annotations

import html
import re

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from app.quotas.models import TenantQuota
from tests.quotas.units_fleet import UnitsFleet, units_fleet
from tests.support.tenancy import signed_in_admin_of
from tests.support.web import HTML, csrf_of


def _with_quota(client: TestClient, db: Session, oidc_issuer: str) -> UnitsFleet:
    fleet = units_fleet(db)
    for class_id, unit, profile, amount in ((fleet.a100.id, "mig", "1g.10gb", 3),
                                            (fleet.h100.id, "share", "", 50)):
        db.add(TenantQuota(tenant_id=fleet.t.acme.id, gpu_class_id=class_id, gpus=0,
                           unit=unit, mig_profile=profile, amount=amount))
    db.flush()
    signed_in_admin_of(client, db, oidc_issuer, fleet.t.acme)
    return fleet


def _text(page: str) -> str:
    return html.unescape(page)


def test_a_cluster_of_slices_is_created_shown_and_resized_from_the_pages(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    fleet = _with_quota(client, db, oidc_issuer)
    page = client.get("/t/acme/clusters", headers=HTML).text
    option = re.search(rf'<option value="{fleet.a100.id}:mig:1g.10gb"[^>]*>([^<]*)</option>',
                       page)
    assert option is not None
    assert _text(option.group(1)) == (
        "A100 SXM4 80GB (NVIDIA-A100-SXM4-80GB): 3 \u00d7 1g.10gb left of 3 \u00d7 1g.10gb of "
        "A100 SXM4 80GB (shared pool only)")
    csrf = csrf_of(page)
    created = client.post("/t/acme/clusters", headers={"X-CSRF-Token": csrf},
                          follow_redirects=False, data={
                              "name": "notebooks", "gpu_class_id": f"{fleet.a100.id}:mig:1g.10gb",
                              "gpus": "2", "cpu_millicores": "4000", "memory_mib": "16384"})
    assert created.status_code == 303, created.text
    row = db.scalars(select(VirtualCluster)).one()
    assert (row.unit, row.mig_profile, row.amount, row.gpus) == ("mig", "1g.10gb", 2, 0)
    detail = _text(client.get("/t/acme/clusters/notebooks", headers=HTML).text)
    assert '<span class="grant">2 \u00d7 1g.10gb of A100 SXM4 80GB</span>' in detail
    assert "Slices of 1g.10gb" in detail
    listed = _text(client.get("/t/acme/clusters", headers=HTML).text)
    assert "2 \u00d7 1g.10gb of A100 SXM4 80GB" in listed

    refused = client.post("/t/acme/clusters/notebooks/resize",
                          headers={**HTML, "X-CSRF-Token": csrf},
                          data={"gpus": "4", "cpu_millicores": "4000", "memory_mib": "16384"})
    assert refused.status_code == 422
    error = re.search(r'id="gpus-error"[^>]*>([^<]*)<', refused.text)
    assert error is not None and "4 \u00d7 1g.10gb asked" in _text(error.group(1))
    resized = client.post("/t/acme/clusters/notebooks/resize",
                          headers={"X-CSRF-Token": csrf}, follow_redirects=False,
                          data={"gpus": "3", "cpu_millicores": "4000", "memory_mib": "16384"})
    assert resized.status_code == 303, resized.text
    db.expire_all()
    assert db.scalars(select(VirtualCluster.amount)).one() == 3


def test_a_cluster_of_a_share_is_created_from_the_form(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    fleet = _with_quota(client, db, oidc_issuer)
    csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)
    too_much = client.post("/t/acme/clusters", headers={"HX-Request": "true",
                                                        "X-CSRF-Token": csrf}, data={
        "name": "inference", "gpu_class_id": f"{fleet.h100.id}:share", "gpus": "0.75",
        "cpu_millicores": "4000", "memory_mib": "16384"})
    assert too_much.status_code == 422
    assert "0.75 of a GPU asked" in _text(too_much.text)
    created = client.post("/t/acme/clusters", headers={"X-CSRF-Token": csrf},
                          follow_redirects=False, data={
                              "name": "inference", "gpu_class_id": f"{fleet.h100.id}:share",
                              "gpus": "0.5", "cpu_millicores": "4000", "memory_mib": "16384"})
    assert created.status_code == 303, created.text
    detail = _text(client.get("/t/acme/clusters/inference", headers=HTML).text)
    assert '<span class="grant">0.5 of an H100 80GB</span>' in detail
