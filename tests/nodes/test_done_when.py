"""Issue 5's "done when": the reference fleet registered on a real kube-apiserver (as kubelets
register, kept Ready by their Lease heartbeats; the node lifecycle controller taints the
NotReady node), synced by the worker through the real adapter; the fleet totals per class are
right (MIG and CPU-only nodes handled); an admin assigns two H100 nodes to a tenant from the
suggestion; the worker labels and taints exactly those two nodes on the server, and a second
pass writes nothing."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.gpu_classes.models import GpuClass
from app.kube.manifests import labels as lbl
from app.reconcilers.runtime import Runtime
from tests import factories
from tests.nodes.conftest import NOT_READY, RESYNC_SECONDS, Fleet, Portal, untimed
from tests.support.principals import bearer

pytestmark = pytest.mark.kube_server

H100 = "NVIDIA-H100-80GB-HBM3"


def _capacity_by_class(client: TestClient, headers: dict[str, str]) -> dict[str, Any]:
    classes = client.get("/api/v1/gpu-classes", headers=headers).json()["items"]
    return {c["product"]: c["capacity"] for c in classes}


def _tenant_marks(fleet: Fleet) -> dict[str, tuple[Any, Any]]:
    """Per node on the server, the portal's tenant label and taints, where it has either."""
    marks = {}
    for name in fleet.names:
        node = fleet.node(name)
        ours = [t for t in (node.get("spec") or {}).get("taints") or []
                if t["key"] == lbl.TENANT]
        label = node["metadata"].get("labels", {}).get(lbl.TENANT)
        if label or ours:
            marks[name] = (label, ours)
    return marks


def test_fleet_from_the_server_and_two_h100_nodes_dedicated(
    fleet: Fleet, portal: Portal, client: TestClient, db: Session,
) -> None:
    worker = Runtime(portal.database, [portal.reconciler], clock=portal.clock)
    worker.run_pass()
    admin = bearer(db, factories.user(db, admin=True))
    slug = f"dw-{secrets.token_hex(3)}"  # the fleet is shared by the package's tests
    tenant = factories.tenant(db, slug)
    h100 = db.scalar(select(GpuClass).where(GpuClass.product == H100))
    assert h100 is not None
    factories.quota(db, tenant, h100, gpus=16)
    db.commit()

    fleet_capacity = _capacity_by_class(client, admin)
    assert sorted(fleet_capacity) == ["NVIDIA-A100-SXM4-80GB", "NVIDIA-GB200", H100,
                                      "NVIDIA-L40S"]
    totals = {p: (c["total"], c["not_ready"], c["free"]) for p, c in fleet_capacity.items()}
    assert totals == {H100: (64, 8, 40), "NVIDIA-GB200": (16, 0, 16),
                      "NVIDIA-L40S": (12, 0, 12), "NVIDIA-A100-SXM4-80GB": (0, 0, 0)}
    assert fleet_capacity["NVIDIA-A100-SXM4-80GB"]["mig_resources"] == {
        "nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 4, "nvidia.com/mig-7g.80gb": 2}

    suggestion = client.post("/api/v1/node-suggestions", headers=admin,
                             json={"tenant": slug, "gpu_class": H100, "gpus": 16}).json()
    chosen = [node["name"] for node in suggestion["nodes"]]
    assert len(chosen) == 2 and suggestion["racks"] == ["rack-2"]
    assert "h100-r2-n4" not in chosen  # the NotReady node is never suggested
    try:
        for name in chosen:
            response = client.put(f"/api/v1/nodes/{name}/assignment", headers=admin,
                                  json={"tenant": slug})
            assert response.status_code == 200, response.text

        portal.connector.forget()
        assert worker.run_pass() == 1  # the assignments enqueued the host: due at once
        assert sorted(portal.connector.writes) == [("apply", "Node", name)
                                                   for name in sorted(chosen)]
        taint = {"key": lbl.TENANT, "value": slug, "effect": "NoSchedule"}
        assert _tenant_marks(fleet) == {name: (slug, [taint]) for name in chosen}
        gfd = fleet.node(chosen[0])
        assert gfd["metadata"]["labels"]["nvidia.com/gpu.product"] == H100  # GFD's stay
        # the lifecycle controller's taints on the NotReady node are untouched
        assert untimed([t for t in fleet.node("h100-r2-n4")["spec"]["taints"]
                        if t["key"] == NOT_READY]) == untimed(fleet.controller_taints)

        portal.connector.forget()
        portal.later(RESYNC_SECONDS)  # the next pass, at the resync
        worker.run_pass()
        # No write: the nodes, and for the dedicated ones the pods on them that might belong
        # to another tenant (node_strangers.py), with the tenant namespaces to tell.
        listed = [(c.method, c.kind) for c in portal.connector.calls]
        assert sorted(listed) == sorted([("list", "Node"), ("list", "Namespace"),
                                         *[("list", "Pod")] * len(chosen)])
        detail = client.get(f"/api/v1/nodes/{chosen[0]}", headers=admin).json()
        assert detail["conditions"][0]["reason"] == "InSync"
    finally:
        for name in chosen:  # the fleet outlives this test: leave the nodes as they were
            client.delete(f"/api/v1/nodes/{name}/assignment", headers=admin)
        worker.run_pass()
    assert _tenant_marks(fleet) == {}
