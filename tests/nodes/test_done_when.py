"""Issue 5's "done when": the reference NodeList served by the Kubernetes emulator, synced by
the worker through the real adapter; the fleet totals per class are right (MIG and CPU-only
nodes handled); an admin assigns two H100 nodes to a tenant from the suggestion; the worker
labels and taints exactly those two nodes, and a second pass writes nothing."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import Database
from app.kube.adapter import KubernetesAdapter
from app.kube.manifests import labels as lbl
from app.nodes.models import GpuClass
from app.nodes.reconciler import NodeReconciler
from app.reconcilers.worker import Worker
from tests import factories
from tests.kube.emulator import KubeEmulator
from tests.nodes.conftest import RACK_LABEL, HostOnly
from tests.support.principals import bearer

H100 = "NVIDIA-H100-80GB-HBM3"


def _worker(database: Database, adapter: KubernetesAdapter) -> Worker:
    settings = Settings(env="test", database_url="sqlite://", rack_label=RACK_LABEL,
                        worker_resync_seconds=0)
    return Worker([NodeReconciler(settings, database, HostOnly(adapter))], poll_seconds=0)


def _capacity_by_class(client: TestClient, headers: dict[str, str]) -> dict[str, Any]:
    classes = client.get("/api/v1/gpu-classes", headers=headers).json()["items"]
    return {c["product"]: c["capacity"] for c in classes}


def _tenant_marks(emulator: KubeEmulator, names: list[str]) -> dict[str, tuple[Any, Any]]:
    marks = {}
    for name in names:
        node = emulator.stored("v1", "Node", name)
        assert node is not None
        ours = [t for t in (node.get("spec") or {}).get("taints") or []
                if t["key"] == lbl.TENANT]
        label = node["metadata"].get("labels", {}).get(lbl.TENANT)
        if label or ours:
            marks[name] = (label, ours)
    return marks


def test_fleet_from_the_emulator_and_two_h100_nodes_dedicated(
    host_nodes: list[dict[str, Any]], kube_emulator: KubeEmulator,
    kube_adapter: KubernetesAdapter, database: Database, client: TestClient, db: Session,
) -> None:
    worker = _worker(database, kube_adapter)
    worker.run_once()
    admin = bearer(db, factories.user(db, admin=True))
    acme = factories.tenant(db, "acme")
    h100 = db.scalar(select(GpuClass).where(GpuClass.product == H100))
    assert h100 is not None
    factories.quota(db, acme, h100, gpus=16)
    db.commit()

    fleet = _capacity_by_class(client, admin)
    assert sorted(fleet) == ["NVIDIA-A100-SXM4-80GB", "NVIDIA-GB200", H100, "NVIDIA-L40S"]
    totals = {p: (c["total"], c["not_ready"], c["free"]) for p, c in fleet.items()}
    assert totals == {H100: (64, 8, 48), "NVIDIA-GB200": (16, 0, 16),
                      "NVIDIA-L40S": (12, 0, 12), "NVIDIA-A100-SXM4-80GB": (0, 0, 0)}
    assert fleet["NVIDIA-A100-SXM4-80GB"]["mig_resources"] == {
        "nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 4, "nvidia.com/mig-7g.80gb": 2}

    suggestion = client.post("/api/v1/node-suggestions", headers=admin,
                             json={"tenant": "acme", "gpu_class": H100, "gpus": 16}).json()
    chosen = [node["name"] for node in suggestion["nodes"]]
    assert len(chosen) == 2 and suggestion["racks"] == ["rack-2"]
    for name in chosen:
        response = client.put(f"/api/v1/nodes/{name}/assignment", headers=admin,
                              json={"tenant": "acme"})
        assert response.status_code == 200, response.text

    worker.run_once()
    all_nodes = [item["metadata"]["name"] for item in host_nodes]
    taint = {"key": lbl.TENANT, "value": "acme", "effect": "NoSchedule"}
    assert _tenant_marks(kube_emulator, all_nodes) == {
        name: ("acme", [taint]) for name in chosen}
    gfd = kube_emulator.stored("v1", "Node", chosen[0])
    assert gfd is not None and gfd["metadata"]["labels"]["nvidia.com/gpu.product"] == H100

    served = len(kube_emulator.requests())
    worker.run_once()
    assert [m for m, _ in kube_emulator.requests()[served:]] == ["GET"]  # one list, no write
    detail = client.get(f"/api/v1/nodes/{chosen[0]}", headers=admin).json()
    assert detail["conditions"][0]["reason"] == "InSync"
