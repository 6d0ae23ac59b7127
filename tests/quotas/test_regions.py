"""Quota per region: a request names the region once host clusters span several; approvals
are checked against the capacity of the class in the request's region."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import insert
from sqlalchemy.orm import Session

from app.hosts.models import HostCluster
from tests import factories
from tests.support.tenancy import build_tenancy, headers

URL = "/api/v1/tenants/acme/quota-requests"


def test_one_region_needs_no_naming_several_do(client: TestClient, db: Session) -> None:
    tenancy = build_tenancy(db)
    db.commit()
    admin = headers(db, tenancy.acme_admin)
    ask = {"gpu_class_id": tenancy.h100.id, "gpus": 4, "reason": "training"}
    alone = client.post(URL, json=ask, headers=admin)
    assert alone.status_code == 201 and alone.json()["region"] == ""
    factories.host_cluster(db, "gpu-us-1", region="us")
    db.commit()
    ambiguous = client.post(URL, json=ask, headers=admin)
    assert ambiguous.status_code == 422
    assert ambiguous.json()["errors"][0]["field"] == "region"
    named = client.post(URL, json={**ask, "region": "us"}, headers=admin)
    assert named.status_code == 201 and named.json()["region"] == "us"
    unknown = client.post(URL, json={**ask, "region": "mars"}, headers=admin)
    assert unknown.status_code == 422 and "no host cluster is in region 'mars'" in (
        unknown.json()["errors"][0]["message"])


def test_a_region_registered_by_another_process_is_accepted_at_once(
    client: TestClient, db: Session
) -> None:
    """The regions are kept briefly; one that is not among them is read again before a 422."""
    tenancy = build_tenancy(db)
    db.commit()
    admin = headers(db, tenancy.acme_admin)
    ask = {"gpu_class_id": tenancy.h100.id, "gpus": 4, "reason": "training"}
    assert client.post(URL, json=ask, headers=admin).status_code == 201  # regions now kept
    # Written below the ORM, as another process's write would be: no session of this one saw it.
    db.connection().execute(insert(HostCluster).values(
        name="gpu-eu-1", region="eu", is_default=False))
    db.commit()
    named = client.post(URL, json={**ask, "region": "eu"}, headers=admin)
    assert named.status_code == 201 and named.json()["region"] == "eu"


def test_an_approval_is_checked_against_the_regions_capacity(client: TestClient,
                                                              db: Session) -> None:
    tenancy = build_tenancy(db)  # 64 H100s on the env host, region ''
    us = factories.host_cluster(db, "gpu-us-1", region="us")
    factories.node(db, us, tenancy.h100, gpu_count=8)
    request = factories.quota_request(db, tenancy.acme, tenancy.h100, gpus=16, region="us")
    db.commit()
    platform = headers(db, tenancy.platform_admin)
    refused = client.post(f"/api/v1/quota-requests/{request.id}/approve", json={},
                          headers=platform)
    assert refused.status_code == 409
    assert "would guarantee 16 of the 8 ready in region us (8 free)" in refused.json()["detail"]
    queue = client.get("/api/v1/quota-requests", headers=platform).json()["items"]
    assert [(q["region"], q["capacity"]["total"]) for q in queue] == [("us", 8)]
    approved = client.post(f"/api/v1/quota-requests/{request.id}/approve",
                           json={"gpus": 8}, headers=platform)
    assert approved.status_code == 200
    quota = client.get("/api/v1/tenants/acme/quota", headers=platform).json()["items"]
    assert [(q["region"], q["approved_gpus"]) for q in quota] == [("us", 8)]


def test_a_regions_figures_count_only_that_regions_hosts(client: TestClient,
                                                          db: Session) -> None:
    """Each quota row and each queued request counts the clusters and dedicated nodes on the
    hosts of its own region, not those of every region some quota or request names."""
    tenancy = build_tenancy(db)  # the env host, region ''
    us = factories.host_cluster(db, "gpu-us-1", region="us")
    factories.node(db, us, tenancy.h100, gpu_count=8)
    for region in ("", "us"):
        factories.quota(db, tenancy.acme, tenancy.h100, 16, region=region)
        factories.quota_request(db, tenancy.acme, tenancy.h100, gpus=4, region=region)
    h100 = tenancy.h100.id
    factories.cluster(db, tenancy.acme, factories.env_host(db), "here", gpu_class_id=h100, gpus=3)
    factories.cluster(db, tenancy.acme, us, "there", gpu_class_id=h100, gpus=5)
    factories.assignment(db, factories.node(db, us, tenancy.h100, gpu_count=2), tenancy.acme)
    db.commit()
    platform = headers(db, tenancy.platform_admin)
    quota = client.get("/api/v1/tenants/acme/quota", headers=platform).json()["items"]
    assert sorted((q["region"], q["allocated_gpus"], q["dedicated_gpus"]) for q in quota) == [
        ("", 3, 0), ("us", 5, 2)]
    queue = client.get("/api/v1/quota-requests", headers=platform).json()["items"]
    assert sorted((q["region"], q["tenant_allocated_gpus"]) for q in queue) == [("", 3), ("us", 5)]
