"""The fleet per host, region and GPU class: what platform admins see in the API and the page;
tenants see none of it."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.clusters import service
from app.clusters.schemas import ClusterCreate
from app.gpu_classes.capacity import of_host
from app.gpu_classes.repository import HostSums
from app.hosts.models import HostCluster
from app.quotas import service as quotas
from app.quotas.repository import BoundGpus
from app.tenants.models import Tenant
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
    assert {k: hosts["gpu-eu-1"][k] for k in ("region", "total", "ready", "dedicated",
                                              "guaranteed", "shared_guaranteed", "free",
                                              "not_ready")} == {
        "region": "eu", "total": 80, "ready": 72, "dedicated": 8, "guaranteed": 8,
        "shared_guaranteed": 0, "free": 64, "not_ready": 8}
    assert {k: hosts["gpu-us-1"][k] for k in ("total", "dedicated", "guaranteed",
                                              "shared_guaranteed", "free")} == {
        "total": 16, "dedicated": 0, "guaranteed": 4, "shared_guaranteed": 4, "free": 12}
    regions = {r["region"]: r for r in found["regions"]}
    assert (regions["us"]["hosts"], regions["us"]["total"], regions["us"]["guaranteed"],
            regions["us"]["free"]) == (["gpu-us-1"], 16, 8, 8)
    # acme's 8 in eu are all on its dedicated node: nothing more of eu's pool is guaranteed,
    # and the 8 GPUs not ready are not free
    assert (regions["eu"]["guaranteed"], regions["eu"]["shared_guaranteed"],
            regions["eu"]["free"]) == (8, 0, 64)
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


def _burst_in_use(db: Session, tenancy: Tenancy, host: str, **burst_by_tenant: float) -> None:
    """What the worker read on ``host``: each tenant's H100s in use, all of them burst."""
    host_id = db.scalars(select(HostCluster.id).where(HostCluster.name == host)).one()
    tenants = {t.slug: t.id for t in db.scalars(select(Tenant))}
    quotas.record_gpus_in_use(db, host_id, {
        (tenants[slug], tenancy.h100.id): BoundGpus(burst, burst_gpus=burst)
        for slug, burst in burst_by_tenant.items()}, datetime.now(UTC))
    db.commit()


def test_borrowed_is_the_burst_in_use_and_lent_what_idle_guarantees_gave(
        client: TestClient, db: Session) -> None:
    """us: 16 ready H100s, 4 guaranteed to acme's cluster, so 12 nobody is guaranteed."""
    tenancy = _fleet(db)
    admin = headers(db, tenancy.platform_admin)

    def figures() -> tuple[float, float]:
        hosts = {h["host_cluster"]: h for h in client.get(URL, headers=admin).json()["hosts"]}
        return hosts["gpu-us-1"]["borrowed"], hosts["gpu-us-1"]["lent_from_idle_guarantees"]

    assert figures() == (0.0, 0.0)
    _burst_in_use(db, tenancy, "gpu-us-1", acme=10.0)
    assert figures() == (10.0, 0.0)  # the unguaranteed GPUs cover it
    _burst_in_use(db, tenancy, "gpu-us-1", acme=10.0, globex=4.5)
    assert figures() == (14.5, 2.5)
    hosts = client.get(URL, headers=admin).json()["hosts"]
    eu = next(h for h in hosts if h["host_cluster"] == "gpu-eu-1")
    assert (eu["borrowed"], eu["lent_from_idle_guarantees"]) == (0.0, 0.0)


def test_the_page_shows_borrowed_and_lent(client: TestClient, db: Session,
                                         oidc_issuer: str) -> None:
    from tests.support import oidc
    from tests.support.web import HTML
    tenancy = _fleet(db)
    _burst_in_use(db, tenancy, "gpu-us-1", acme=14.0)
    oidc.register_user(oidc_issuer, tenancy.platform_admin.email, groups=["platform-admins"])
    oidc.sign_in(client, tenancy.platform_admin.email)
    page = client.get("/admin/fleet/hosts", params={"region": "us"}, headers=HTML).text
    row = page.split('data-host="gpu-us-1"')[1].split("</tr>")[0]
    assert '<td class="borrowed">14</td><td class="lent">2</td>' in row
    assert "Lent from idle guarantees" in page


def test_dedicated_gpus_are_not_there_to_borrow() -> None:
    figures = of_host(HostSums(total=16, dedicated=8, placed_shared=4, borrowed=6.0))
    assert figures.free == 4
    assert figures.lent == 2.0  # 4 unguaranteed shared GPUs, 6 borrowed


def test_gpus_not_ready_are_not_there_to_borrow() -> None:
    """A node not ready, dedicated or not, lends nothing: its GPUs are not free."""
    figures = of_host(HostSums(total=24, not_ready=16, dedicated=8, dedicated_not_ready=8,
                               placed_shared=4, borrowed=6.0))
    assert (figures.free, figures.lent) == (4, 2.0)
