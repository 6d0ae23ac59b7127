"""Issue 61: clusters of MIG slices and of a share of one GPU over the API. Quota asked and
approved in the unit, then a shared-pool cluster drawing on it, resized within its unit and its
quota; refusals in words (beyond the quota, off the unit, a host without the slices)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.clusters.models import VirtualCluster
from app.nodes.models import Node
from tests.quotas.units_fleet import UnitsFleet, units_fleet
from tests.support.tenancy import headers

URL = "/api/v1/tenants/acme/clusters"


def _approved(client: TestClient, db: Session, fleet: UnitsFleet, **asked: Any) -> None:
    """Quota asked by acme's admin and approved by a platform admin, over the API."""
    sent = client.post("/api/v1/tenants/acme/quota-requests",
                       headers=headers(db, fleet.t.acme_admin), json={"reason": "r", **asked})
    assert sent.status_code == 201, sent.text
    decided = client.post(f"/api/v1/quota-requests/{sent.json()['id']}/approve",
                          headers=headers(db, fleet.t.platform_admin), json={})
    assert decided.status_code == 200, decided.text


def _create(client: TestClient, db: Session, fleet: UnitsFleet, **fields: Any) -> Any:
    return client.post(URL, headers=headers(db, fleet.t.acme_admin), json={
        "name": "notebooks", "kubernetes_version": "1.32.4", "cpu_millicores": 4000,
        "memory_mib": 16384, **fields})


def _resize(client: TestClient, db: Session, fleet: UnitsFleet, name: str, **sizes: Any) -> Any:
    return client.patch(f"{URL}/{name}", headers=headers(db, fleet.t.acme_admin), json=sizes)


def test_slices_go_from_quota_request_to_a_cluster_and_resize_within_the_quota(
        client: TestClient, db: Session) -> None:
    fleet = units_fleet(db)
    _approved(client, db, fleet, gpu_class_id=fleet.a100.id, slices=3, mig_profile="1g.10gb")
    created = _create(client, db, fleet, gpu_class_id=fleet.a100.id, slices=2,
                      mig_profile="1g.10gb")
    assert created.status_code == 201, created.text
    cluster = created.json()
    assert (cluster["gpus"], cluster["unit"], cluster["mig_profile"], cluster["amount"],
            cluster["slices"], cluster["grant"]) == (
        0, "mig", "1g.10gb", 2, 2, "2 \u00d7 1g.10gb of A100 SXM4 80GB")
    assert "1g.10gb slices of A100 SXM4 80GB on its nodes" in cluster["placement_reason"]
    listed = client.get(URL, headers=headers(db, fleet.t.acme_admin)).json()["items"]
    assert [(c["name"], c["grant"]) for c in listed] == [
        ("notebooks", "2 \u00d7 1g.10gb of A100 SXM4 80GB")]

    beyond = _resize(client, db, fleet, "notebooks", slices=4)
    assert beyond.status_code == 422
    assert beyond.json()["errors"] == [{"field": "slices", "message": (
        "you have 3 \u00d7 1g.10gb of A100 SXM4 80GB approved; 3 \u00d7 1g.10gb left for "
        "shared-pool clusters, 4 \u00d7 1g.10gb asked: request more quota first")}]
    off_unit = _resize(client, db, fleet, "notebooks", gpus=1)
    assert off_unit.status_code == 422
    assert off_unit.json()["errors"][0]["field"] == "gpus"
    grown = _resize(client, db, fleet, "notebooks", slices=3)
    assert grown.status_code == 200, grown.text
    assert grown.json()["grant"] == "3 \u00d7 1g.10gb of A100 SXM4 80GB"
    resize = db.scalars(select(AuditEvent).where(
        AuditEvent.action == "virtual_cluster.resize")).one()
    assert resize.before is not None and resize.after is not None
    assert (resize.before["amount"], resize.after["amount"]) == (2, 3)

    quota = client.get("/api/v1/tenants/acme/quota",
                       headers=headers(db, fleet.t.acme_admin)).json()["items"]
    [slices] = [q for q in quota if q["unit"] == "mig"]
    assert (slices["allocated_amount"], slices["left_amount"], slices["left"]) == (
        3, 0, "0 \u00d7 1g.10gb")


def test_a_share_goes_from_quota_request_to_a_cluster(client: TestClient, db: Session) -> None:
    fleet = units_fleet(db)
    _approved(client, db, fleet, gpu_class_id=fleet.h100.id, gpu_share="0.5")
    created = _create(client, db, fleet, gpu_class_id=fleet.h100.id, gpu_share="0.5")
    assert created.status_code == 201, created.text
    cluster = created.json()
    assert (cluster["unit"], cluster["gpu_share"], cluster["grant"]) == (
        "share", "0.5", "0.5 of an H100 80GB")
    row = db.scalars(select(VirtualCluster)).one()
    assert (row.unit, row.gpus, row.amount, row.placement) == ("share", 0, 50, "shared-pool")
    second = _create(client, db, fleet, name="more", gpu_class_id=fleet.h100.id,
                     gpu_share="0.25")
    assert second.status_code == 422
    assert second.json()["errors"] == [{"field": "gpu_share", "message": (
        "your shared-pool clusters hold 0.5 of a GPU of your 0.5 of an H100 80GB; 0 of a GPU "
        "left for shared-pool clusters, 0.25 of a GPU asked: request more quota first")}]


def test_a_cluster_of_slices_or_a_share_is_in_the_shared_pool_only(
        client: TestClient, db: Session) -> None:
    fleet = units_fleet(db)
    _approved(client, db, fleet, gpu_class_id=fleet.a100.id, slices=3, mig_profile="1g.10gb")
    refused = _create(client, db, fleet, gpu_class_id=fleet.a100.id, slices=2,
                      mig_profile="1g.10gb", placement="dedicated-nodes")
    assert refused.status_code == 422
    assert refused.json()["errors"] == [{"field": "placement", "message": (
        "a cluster of MIG slices is in the shared pool only: dedicated and private nodes are "
        "whole GPUs")}]
    mixed = _create(client, db, fleet, gpu_class_id=fleet.a100.id, gpus=1, slices=2,
                    mig_profile="1g.10gb")
    assert mixed.status_code == 422
    assert mixed.json()["errors"][0]["message"] == (
        "give only one of gpus, slices (with mig_profile) and gpu_share")


def test_slices_of_a_profile_no_host_has_are_refused_per_host(
        client: TestClient, db: Session) -> None:
    fleet = units_fleet(db)
    # Quota of a profile the fleet no longer has (a MIG reconfiguration took it away).
    _approved(client, db, fleet, gpu_class_id=fleet.a100.id, slices=2, mig_profile="7g.80gb")
    a100_node = db.scalars(select(Node).where(Node.name == "a100-mig-n1")).one()
    a100_node.mig_resources = {"nvidia.com/mig-1g.10gb": 14}
    db.flush()
    refused = _create(client, db, fleet, gpu_class_id=fleet.a100.id, slices=1,
                      mig_profile="7g.80gb")
    assert refused.status_code == 409, refused.text
    assert "has no 7g.80gb slices of A100 SXM4 80GB" in refused.json()["detail"]
