"""The fleet per host, region and GPU class: what platform admins see in the API and the page;
tenants see none of it."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.clusters import service
from app.clusters.schemas import ClusterCreate
from tests import factories
from tests.clusters.support import cluster_settings
from tests.support.tenancy import Tenancy, build_tenancy, headers

URL = "/api/v1/fleet/capacity"


def _fleet(db: Session) -> Tenancy:
    """eu: the env host with 64 H100s (8 dedicated to acme, one node of 8 not ready);
    us: 16 H100s; acme holds 8 H100s of quota in each region and a 4-GPU cluster in us."""
    tenancy = build_tenancy(db)
    eu = factories.env_host(db)
    eu.name, eu.region = "gpu-eu-1", "eu"
    factories.assignment(db, factories.node(db, eu, tenancy.h100, gpu_count=8), tenancy.acme)
    factories.node(db, eu, tenancy.h100, gpu_count=8, ready=False)
    us = factories.registered_host(db, "gpu-us-1", region="us")
    for _ in range(2):
        factories.node(db, us, tenancy.h100, gpu_count=8)
    factories.quota(db, tenancy.acme, tenancy.h100, 8, region="eu")
    factories.quota(db, tenancy.acme, tenancy.h100, 8, region="us")
    service.create_cluster(db, tenancy.principal(tenancy.acme_admin), cluster_settings(),
                           "acme", ClusterCreate(name="serve", region="us",
                                                 gpu_class_id=tenancy.h100.id, gpus=4))
    db.commit()
    return tenancy


def test_capacity_per_host_and_region(client: TestClient, db: Session) -> None:
    tenancy = _fleet(db)
    found = client.get(URL, headers=headers(db, tenancy.platform_admin)).json()
    hosts = {h["host_cluster"]: h for h in found["hosts"]}
    assert {k: hosts["gpu-eu-1"][k] for k in ("region", "total", "dedicated", "guaranteed",
                                              "free", "not_ready")} == {
        "region": "eu", "total": 80, "dedicated": 8, "guaranteed": 0, "free": 72,
        "not_ready": 8}
    assert {k: hosts["gpu-us-1"][k] for k in ("total", "dedicated", "guaranteed", "free")} == {
        "total": 16, "dedicated": 0, "guaranteed": 4, "free": 12}
    regions = {r["region"]: r for r in found["regions"]}
    assert (regions["us"]["hosts"], regions["us"]["total"], regions["us"]["guaranteed"],
            regions["us"]["free"]) == (["gpu-us-1"], 16, 8, 8)
    # acme's 8 in eu are all on its dedicated node: nothing more of eu's pool is guaranteed
    assert (regions["eu"]["guaranteed"], regions["eu"]["free"]) == (8, 72)
    only_us = client.get(URL, params={"region": "us"},
                         headers=headers(db, tenancy.platform_admin)).json()
    assert [h["host_cluster"] for h in only_us["hosts"]] == ["gpu-us-1"]
    assert [r["region"] for r in only_us["regions"]] == ["us"]
    one_host = client.get(URL, params={"host_cluster": "gpu-eu-1"},
                          headers=headers(db, tenancy.platform_admin)).json()
    assert [h["host_cluster"] for h in one_host["hosts"]] == ["gpu-eu-1"]


def test_tenants_may_not_see_the_fleet(client: TestClient, db: Session) -> None:
    tenancy = _fleet(db)
    assert client.get(URL, headers=headers(db, tenancy.acme_admin)).status_code == 403


def test_the_page_groups_by_region_and_host(client: TestClient, db: Session,
                                            oidc_issuer: str) -> None:
    from tests.support import oidc
    from tests.support.web import HTML
    tenancy = _fleet(db)
    oidc.register_user(oidc_issuer, tenancy.platform_admin.email, groups=["platform-admins"])
    oidc.sign_in(client, tenancy.platform_admin.email)
    page = client.get("/admin/fleet/hosts", params={"region": "us"}, headers=HTML)
    assert page.status_code == 200
    assert 'data-host="gpu-us-1"' in page.text and 'data-host="gpu-eu-1"' not in page.text
    assert 'id="host-capacity-chart"' in page.text and 'id="region-capacity-chart"' in page.text
    assert '<option value="eu"' in page.text  # every region stays offered
