"""Clusters go only to hosts that take new clusters: a cordoned or draining host takes none, and
with no host open a create is a 409 that says why and stores nothing."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.clusters.models import VirtualCluster
from app.hosts import repository as hosts_repository
from app.hosts import service as hosts_service
from tests.support.tenancy import Tenancy, headers

URL = "/api/v1/tenants/acme/clusters"


def test_a_cluster_create_with_every_host_cordoned_is_a_409_and_stores_nothing(
        client: TestClient, db: Session, tenancy: Tenancy) -> None:
    admin = Principal(user=tenancy.platform_admin, via="token")
    default = hosts_repository.ensure_default_host(db)
    hosts_service.set_state(db, admin, default.name, "cordoned")
    db.commit()
    body = {"name": "train", "kubernetes_version": "1.32.4", "placement": "shared-pool",
            "gpu_class_id": tenancy.h100.id, "gpus": 1, "cpu_millicores": 1000,
            "memory_mib": 1024}
    refused = client.post(URL, json=body, headers=headers(db, tenancy.acme_admin))
    assert refused.status_code == 409, refused.text
    assert "every host is cordoned or draining" in refused.json()["detail"]
    assert db.scalar(select(func.count()).select_from(VirtualCluster)) == 0
    hosts_service.set_state(db, admin, default.name, "active")
    db.commit()
    created = client.post(URL, json=body, headers=headers(db, tenancy.acme_admin))
    assert created.status_code == 201, created.text
    row = db.scalars(select(VirtualCluster)).one()
    assert row.host_cluster_id == default.id
