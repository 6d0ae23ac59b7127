"""The three capacity disagreements issue 29 reported, each on the data it was seen with: the
pages now say the same as each other, as their own tables and as the API."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.gpu_classes.models import GpuClass
from tests import factories
from tests.support.capacity import chart_of, charted, of_api, queue_rows_of, rows_of
from tests.support.tenancy import Tenancy, build_tenancy, headers
from tests.support.web import HTML

GB200 = "NVIDIA-GB200"


def _gb200_with_4_dedicated(db: Session) -> tuple[Tenancy, GpuClass]:
    """16 GB200 GPUs on four nodes of the one host; acme holds a quota of 4, all of it on the
    node dedicated to it."""
    tenancy = build_tenancy(db)
    gb200 = factories.gpu_class(db, GB200, display_name="GB200")
    host = factories.env_host(db)
    nodes = [factories.node(db, host, gb200, gpu_count=4) for _ in range(4)]
    factories.quota(db, tenancy.acme, gb200, 4)
    factories.assignment(db, nodes[0], tenancy.acme)
    db.commit()
    return tenancy, gb200


def _page(client: TestClient, db: Session, tenancy: Tenancy, path: str) -> str:
    page = client.get(path, headers={**headers(db, tenancy.platform_admin), **HTML})
    assert page.status_code == 200, page.text
    return str(page.text)


def test_the_by_region_chart_counts_dedicated_gpus_once(client: TestClient,
                                                        db: Session) -> None:
    """It said "20 total" for 16 GB200 GPUs: the 4 dedicated counted as dedicated and again as
    guaranteed."""
    tenancy, _ = _gb200_with_4_dedicated(db)
    page = _page(client, db, tenancy, "/admin/fleet/hosts")
    [region] = [figures for (_, product), figures
                in rows_of(page, "region-capacity", ("region", "gpu-class")).items()
                if product == GB200]
    bar = chart_of(page, "region-capacity-chart")["(no region) · GB200"]
    assert region["total"] == 16 and sum(bar.values()) == 16
    assert bar == charted(region)
    assert "16 total" in page.split('id="region-capacity-chart"')[1].split("</svg>")[0]
    host_bar = chart_of(page, "host-capacity-chart")["default · GB200"]
    assert sum(host_bar.values()) == 16


def test_dedicated_gpus_are_guaranteed_alike_on_every_page(client: TestClient,
                                                           db: Session) -> None:
    """After dedicating 4 GB200 GPUs, the Fleet page said 0 guaranteed while GPU classes and
    by-region said 4."""
    tenancy, _ = _gb200_with_4_dedicated(db)
    fleet = rows_of(_page(client, db, tenancy, "/admin/fleet"), "fleet-capacity",
                    ("gpu-class",))[GB200,]
    classes = rows_of(_page(client, db, tenancy, "/admin/gpu-classes"), "gpu-classes",
                      ("gpu-class",))[GB200,]
    by_region = rows_of(_page(client, db, tenancy, "/admin/fleet/hosts"), "region-capacity",
                        ("gpu-class",))[GB200,]
    api = of_api(next(c["capacity"] for c in client.get(
        "/api/v1/gpu-classes", headers=headers(db, tenancy.platform_admin)).json()["items"]
        if c["product"] == GB200))
    expected = {"total": 16, "dedicated": 4, "guaranteed": 4, "shared_guaranteed": 0,
                "free": 12}
    for shown in (fleet, classes, by_region, api):
        assert {figure: shown[figure] for figure in expected} == expected
    assert fleet == classes == by_region == api


def test_the_queue_counts_gpus_not_ready_apart_and_never_as_free(client: TestClient,
                                                                 db: Session) -> None:
    """It said "total GPUs on live nodes: 64" while 8 of those H100s were NotReady, and let
    an approval guarantee them without an overcommit."""
    tenancy = build_tenancy(db, nodes=7)
    factories.node(db, factories.env_host(db), tenancy.h100, gpu_count=8, ready=False)
    request = factories.quota_request(db, tenancy.acme, tenancy.h100, gpus=60)
    db.commit()
    admin = headers(db, tenancy.platform_admin)
    [item] = client.get("/api/v1/quota-requests", headers=admin).json()["items"]
    line = queue_rows_of(_page(client, db, tenancy, "/admin/quota-requests"))[
        tenancy.h100.product, ""]
    for shown in (of_api(item["capacity"]), line):
        assert (shown["total"], shown["ready"], shown["not_ready"], shown["free"]) == (
            64, 56, 8, 56)
    refused = client.post(f"/api/v1/quota-requests/{request.id}/approve", headers=admin,
                          json={})
    assert refused.status_code == 409, refused.text
    assert "would guarantee 60 of the 56 ready (56 free)" in refused.json()["detail"]
    assert client.post(f"/api/v1/quota-requests/{request.id}/approve", headers=admin,
                       json={"gpus": 56}).status_code == 200
