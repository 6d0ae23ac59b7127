"""GPU classes: declared by platform admins, capacity from the node inventory."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.database.core import utcnow
from app.gpu_classes.service import capacity
from tests import factories
from tests.support.tenancy import build_tenancy, headers


def test_capacity_counts_live_nodes_quota_and_dedicated_nodes_once(db: Session) -> None:
    t = build_tenancy(db, nodes=2, gpus_per_node=8)
    host = factories.host_cluster(db)
    factories.node(db, host, t.h100, gpu_count=8, gone_at=utcnow() - timedelta(hours=1))
    dedicated = factories.node(db, host, t.h100, gpu_count=4)
    factories.assignment(db, dedicated, t.acme)
    factories.quota(db, t.acme, t.h100, gpus=12)
    assert capacity(db, t.h100.id).model_dump() == {
        "total": 20, "ready": 20, "not_ready": 0, "dedicated": 4, "assigned": 4,
        "guaranteed": 12, "shared_guaranteed": 8, "free": 8, "in_use": 0.0, "borrowed": 0.0,
        "lent_from_idle_guarantees": 0.0, "mig_resources": {},
        "shared_fraction_gpus": 0, "mig_profiles": [], "shared": None}


def test_platform_admins_declare_and_rename_classes(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    pa = headers(db, t.platform_admin)
    declared = client.post("/api/v1/gpu-classes", headers=pa, json={
        "product": "NVIDIA-A100-SXM4-40GB", "display_name": "A100 40GB", "memory_mib": 40960})
    assert declared.status_code == 201, declared.text
    body = declared.json()
    assert body["declared_by_admin"] is True
    assert body["capacity"] == {
        "total": 0, "ready": 0, "not_ready": 0, "dedicated": 0, "assigned": 0, "guaranteed": 0,
        "shared_guaranteed": 0, "free": 0, "in_use": 0.0, "borrowed": 0.0,
        "lent_from_idle_guarantees": 0.0, "mig_resources": {},
        "shared_fraction_gpus": 0, "mig_profiles": [], "shared": None}
    renamed = client.patch(f"/api/v1/gpu-classes/{body['id']}", headers=pa,
                           json={"display_name": "A100"})
    assert renamed.json()["display_name"] == "A100"
    assert client.post("/api/v1/gpu-classes", headers=pa, json={
        "product": "NVIDIA-A100-SXM4-40GB", "display_name": "dup"}).status_code == 409


def test_tenants_see_classes_without_fleet_figures_and_cannot_declare(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    auth = headers(db, t.acme_admin)
    listed = client.get("/api/v1/gpu-classes", headers=auth).json()["items"]
    assert [(c["product"], c["capacity"]) for c in listed] == [("NVIDIA-H100-80GB-HBM3", None)]
    assert client.post("/api/v1/gpu-classes", headers=auth, json={
        "product": "X", "display_name": "X"}).status_code == 403
    assert client.patch(f"/api/v1/gpu-classes/{t.h100.id}", headers=auth,
                        json={"display_name": "mine"}).status_code == 403


def test_bad_classes_are_field_errors(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    pa = headers(db, t.platform_admin)
    for body, field in (({"product": "has space", "display_name": "x"}, "product"),
                        ({"product": "x" * 64, "display_name": "x"}, "product"),
                        ({"product": "ok", "display_name": "x", "memory_mib": -1},
                         "memory_mib"),
                        ({"product": "ok", "display_name": "x", "memory_mib": 1.5},
                         "memory_mib"),
                        ({"product": "ok", "display_name": "\x7f"}, "display_name")):
        response = client.post("/api/v1/gpu-classes", headers=pa, json=body)
        assert response.status_code == 422, body
        assert response.json()["errors"][0]["field"] == field
    assert client.patch("/api/v1/gpu-classes/999999", headers=pa,
                        json={"display_name": "x"}).status_code == 404
