"""Placement through the service and the API: two hosts in two regions, quota in each; the
choice and its reason stored, shown and audited; a refusal names every host's reasons."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.database.core import Database
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.kit.config import Settings
from app.process.asgi import create_app
from tests import factories
from tests.support.kube import InMemoryConnector
from tests.support.tenancy import Tenancy, build_tenancy, headers

URL = "/api/v1/tenants/acme/clusters"


@pytest.fixture
def two_regions(db: Session) -> Tenancy:
    """acme: 8 H100s of quota in eu (the env host, 64 H100s) and 4 in us (a second host
    with 16)."""
    tenancy = build_tenancy(db)
    eu = factories.env_host(db)
    eu.name, eu.region = "gpu-eu-1", "eu"
    us = factories.registered_host(db, "gpu-us-1", region="us")
    for _ in range(2):
        factories.node(db, us, tenancy.h100, gpu_count=8)
    factories.quota(db, tenancy.acme, tenancy.h100, 8, region="eu")
    factories.quota(db, tenancy.acme, tenancy.h100, 4, region="us")
    db.commit()
    return tenancy


def body(gpu_class: GpuClass, name: str, gpus: int, **more: Any) -> dict[str, Any]:
    return {"name": name, "gpu_class_id": gpu_class.id, "gpus": gpus, **more}


def test_a_named_region_places_on_its_host_and_the_reason_is_shown_and_audited(
    client: TestClient, db: Session, two_regions: Tenancy
) -> None:
    admin = headers(db, two_regions.acme_admin)
    created = client.post(URL, json=body(two_regions.h100, "serve", 2, region="us"),
                          headers=admin)
    assert created.status_code == 201, created.text
    out = created.json()
    assert (out["host_cluster"], out["region"]) == ("gpu-us-1", "us")
    assert out["placement_reason"].startswith("gpu-us-1: region us as requested")
    member = headers(db, two_regions.acme_member)
    listed = client.get(URL, headers=member).json()["items"]
    assert [(c["name"], c["region"], c["host_cluster"]) for c in listed] == [
        ("serve", "us", "gpu-us-1")]
    assert "credentials" not in created.text and "kubeconfig" not in created.text
    event = db.scalar(select(AuditEvent).where(AuditEvent.action == "virtual_cluster.create"))
    assert event is not None and event.after is not None
    assert (event.after["host_cluster"], event.after["region"]) == ("gpu-us-1", "us")
    assert event.after["placement_reason"] == out["placement_reason"]


def test_without_a_region_the_portal_picks_one_where_the_quota_has_room(
    client: TestClient, db: Session, two_regions: Tenancy
) -> None:
    admin = headers(db, two_regions.acme_admin)
    big = client.post(URL, json=body(two_regions.h100, "big", 6), headers=admin).json()
    assert big["region"] == "eu" and "chosen by the portal" in big["placement_reason"]
    # eu has 2 left, us 4: the next 4 can only go to us
    more = client.post(URL, json=body(two_regions.h100, "more", 4), headers=admin).json()
    assert more["region"] == "us"
    refused = client.post(URL, json=body(two_regions.h100, "none", 3), headers=admin)
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "gpus"
    assert "(eu: 2, us: 0)" in refused.json()["errors"][0]["message"]


def test_quota_is_counted_per_region(client: TestClient, db: Session,
                                     two_regions: Tenancy) -> None:
    admin = headers(db, two_regions.acme_admin)
    refused = client.post(URL, json=body(two_regions.h100, "serve", 5, region="us"),
                          headers=admin)
    assert refused.status_code == 422
    assert refused.json()["errors"] == [{"field": "gpus", "message": (
        "you have 4 H100 80GB GPUs approved in region us; 4 are left for shared-pool "
        "clusters, 5 asked: request more quota first")}]
    quota = client.get("/api/v1/tenants/acme/quota", headers=admin).json()["items"]
    assert sorted((q["region"], q["approved_gpus"]) for q in quota) == [("eu", 8), ("us", 4)]


def test_when_no_host_fits_the_conflict_lists_each_host_and_why(
    client: TestClient, db: Session, two_regions: Tenancy
) -> None:
    us = db.scalar(select(HostCluster).where(HostCluster.name == "gpu-us-1"))
    assert us is not None
    us.state = "cordoned"
    db.commit()
    admin = headers(db, two_regions.acme_admin)
    refused = client.post(URL, json=body(two_regions.h100, "serve", 2, region="us"),
                          headers=admin)
    assert refused.status_code == 409
    problem = refused.json()
    assert problem["hosts"] == [
        {"host": "gpu-eu-1", "region": "eu", "reasons": ["in region eu, not us"]},
        {"host": "gpu-us-1", "region": "us",
         "reasons": ["host is cordoned and takes no new clusters"]}]
    assert problem["errors"][0]["field"] == "region"
    unknown = client.post(URL, json=body(two_regions.h100, "serve", 2, region="mars"),
                          headers=admin)
    assert unknown.status_code == 422 and unknown.json()["errors"][0]["field"] == "region"
    assert "choose one of eu, us" in unknown.json()["errors"][0]["message"]


def test_a_host_without_a_webhook_url_takes_no_shared_pool_cluster(
    client: TestClient, db: Session, two_regions: Tenancy, settings: Settings,
    database: Database
) -> None:
    """Its API server could not reach the webhook that puts shared-pool pods in their KAI
    queue: placement says so; with vCluster Pro (translate patches) the host is fine."""
    us = db.scalar(select(HostCluster).where(HostCluster.name == "gpu-us-1"))
    assert us is not None
    us.webhook_url = None
    db.commit()
    admin = headers(db, two_regions.acme_admin)
    refused = client.post(URL, json=body(two_regions.h100, "serve", 2, region="us"),
                          headers=admin)
    assert refused.status_code == 409
    [on_us] = [h for h in refused.json()["hosts"] if h["host"] == "gpu-us-1"]
    assert on_us["reasons"] == ["no admission webhook URL is set for it, and shared-pool "
                                "pods need the webhook to join their KAI queue"]
    pro = settings.model_copy(update={"vcluster_edition": "pro"})
    with TestClient(create_app(pro, database, kube=InMemoryConnector())) as pro_client:
        placed = pro_client.post(URL, json=body(two_regions.h100, "serve", 2, region="us"),
                                 headers=admin)
    assert placed.status_code == 201, placed.text
    assert placed.json()["host_cluster"] == "gpu-us-1"


def test_a_host_without_a_webhook_url_takes_no_hardened_cluster(
    db: Session, two_regions: Tenancy, settings: Settings, database: Database
) -> None:
    """At Pod Security baseline the webhook gives every pod the RuntimeDefault seccomp profile:
    a host whose API server cannot reach it gets no such cluster (even on vCluster Pro, where
    shared-pool pods need no webhook), and the refusal says why."""
    us = db.scalar(select(HostCluster).where(HostCluster.name == "gpu-us-1"))
    assert us is not None
    us.webhook_url = None
    db.commit()
    admin = headers(db, two_regions.acme_admin)
    baseline = settings.model_copy(update={"vcluster_edition": "pro", "pod_security": "baseline"})
    with TestClient(create_app(baseline, database, kube=InMemoryConnector())) as pro_client:
        refused = pro_client.post(URL, json=body(two_regions.h100, "serve", 2, region="us"),
                                  headers=admin)
        assert refused.status_code == 409
        [on_us] = [h for h in refused.json()["hosts"] if h["host"] == "gpu-us-1"]
        assert on_us["reasons"] == [
            "no admission webhook URL is set for it, and the cluster's pods get their "
            "hardening (the seccomp RuntimeDefault profile) from the webhook"]
        us.webhook_url = "https://portal-webhook.example.com"
        db.commit()
        placed = pro_client.post(URL, json=body(two_regions.h100, "serve", 2, region="us"),
                                 headers=admin)
    assert placed.status_code == 201, placed.text
    assert placed.json()["host_cluster"] == "gpu-us-1"


def test_dedicated_nodes_place_the_cluster_on_the_host_holding_the_tenants_nodes(
    client: TestClient, db: Session, two_regions: Tenancy
) -> None:
    us = db.scalar(select(HostCluster).where(HostCluster.name == "gpu-us-1"))
    assert us is not None
    node = factories.node(db, us, two_regions.h100, gpu_count=4)
    factories.assignment(db, node, two_regions.acme)
    db.commit()
    admin = headers(db, two_regions.acme_admin)
    placed = client.post(URL, json=body(two_regions.h100, "mine", 4,
                                        placement="dedicated-nodes"), headers=admin)
    assert placed.status_code == 201, placed.text
    assert placed.json()["host_cluster"] == "gpu-us-1"
    assert "4 GPUs free on the tenant's dedicated H100 80GB nodes" in (
        placed.json()["placement_reason"])


def test_the_cluster_page_shows_where_it_runs_and_why(
    client: TestClient, db: Session, two_regions: Tenancy, oidc_issuer: str
) -> None:
    from tests.support.tenancy import signed_in_admin_of
    from tests.support.web import HTML
    admin = headers(db, two_regions.acme_admin)
    client.post(URL, json=body(two_regions.h100, "serve", 2, region="us"), headers=admin)
    signed_in_admin_of(client, db, oidc_issuer, two_regions.acme)
    page = client.get("/t/acme/clusters/serve", headers=HTML).text
    assert "Runs on host cluster <strong>gpu-us-1</strong> in region <strong>us</strong>" in page
    assert "Why there: gpu-us-1: region us as requested" in page
    form = client.get("/t/acme/clusters", headers=HTML).text
    assert '<option value="eu"' in form and '<option value="us"' in form
