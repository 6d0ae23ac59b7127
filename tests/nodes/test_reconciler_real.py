"""The inventory sync and the node reconciler on the reference fleet, registered on a real
kube-apiserver whose controller-manager runs the node lifecycle controller.

The reference nodes are registered as kubelets register them (created, then their status
written through the ``nodes/{name}/status`` subresource, as another field manager than the
portal) and kept alive by Lease heartbeats, as kubelets keep them. The NotReady node gets the
lifecycle controller's ``node.kubernetes.io/not-ready`` taint: a taint of someone else's that a
tenant assignment must leave in place.
"""

from __future__ import annotations

import copy
import json
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import Database, utcnow
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.manifests import labels as lbl
from app.kube.port import Manifest, register_kind
from app.nodes.gpu_classes import capacity
from app.nodes.models import GpuClass, Node, NodeAssignment
from app.nodes.reconciler import NodeReconciler
from tests import factories
from tests.support.kube import RecordingConnector, RecordingPort
from tests.support.kube_server import ApiServer
from tests.support.kubectl import Kubectl
from tests.support.paths import HOST_NODES

pytestmark = pytest.mark.kube_server

RACK_LABEL = "network.topology.example.com/rack"
H100, GB200, L40S, A100 = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-GB200", "NVIDIA-L40S",
                           "NVIDIA-A100-SXM4-80GB")
NOT_READY = "node.kubernetes.io/not-ready"
LEASE_API = "coordination.k8s.io/v1"
LEASE_NAMESPACE = "kube-node-lease"
HEARTBEAT_SECONDS = 5.0
register_kind(LEASE_API, "Lease", "leases", namespaced=True)


def reference_nodes() -> list[Manifest]:
    items: list[Manifest] = json.loads(HOST_NODES.read_text())["items"]
    return [{"apiVersion": "v1", "kind": "Node", **item} for item in items]


# ----- the fleet, registered once per module


class Heartbeats:
    """Renews every node's Lease as its kubelet would, so that the node lifecycle controller
    keeps the status the nodes registered with (without, it marks them Unknown after ~50 s)."""

    def __init__(self, kubelet: Kubectl, names: list[str]) -> None:
        self.kubelet = kubelet
        self.names = names
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kubelet-heartbeats",
                                        daemon=True)

    def start(self) -> None:
        self.beat()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def beat(self) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        for name in self.names:
            self.kubelet.apply({
                "apiVersion": LEASE_API, "kind": "Lease",
                "metadata": {"name": name, "namespace": LEASE_NAMESPACE},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now},
            })

    def _loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            self.beat()


@dataclass
class Fleet:
    api: ApiServer
    admin: KubernetesAdapter
    kubectl: Kubectl  # an operator editing nodes by hand
    kubeconfig: Path
    names: list[str]
    # What the lifecycle controller put on the NotReady node: not-ready NoSchedule and NoExecute
    controller_taints: list[Manifest]

    def node(self, name: str) -> Manifest:
        found = self.admin.get("v1", "Node", name)
        assert found is not None, f"node {name} is not on the server"
        return found


def register(kubelet: Kubectl, node: Manifest) -> None:
    """Create the Node, then write its status through the status subresource."""
    body = copy.deepcopy(node)
    status = body.pop("status")
    kubelet.create(body)
    kubelet.merge_patch("v1", "Node", node["metadata"]["name"], None, {"status": status},
                        subresource="status")


def not_ready_taints(admin: KubernetesAdapter) -> list[Manifest]:
    node = admin.get("v1", "Node", "h100-r2-n4") or {}
    return [taint for taint in (node.get("spec") or {}).get("taints") or []
            if taint["key"] == NOT_READY]


def wait_for(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def fleet(host_api: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    workdir = tmp_path_factory.mktemp("real-nodes")
    kubelet = Kubectl(host_api, workdir / "kubelet", manager="kubelet")
    kubectl = Kubectl(host_api, workdir / "kubectl", manager="kubectl-edit")
    admin = host_api.adapter()
    nodes = reference_nodes()
    names = [node["metadata"]["name"] for node in nodes]
    heartbeats = Heartbeats(kubelet, names)
    try:
        for node in nodes:
            register(kubelet, node)
        heartbeats.start()
        # The lifecycle controller taints the NotReady node NoSchedule at once, and NoExecute
        # at its eviction rate; waiting for both keeps the listings stable during the tests.
        wait_for(lambda: len(not_ready_taints(admin)) == 2, "the not-ready taints", 90.0)
        yield Fleet(host_api, admin, kubectl,
                    host_api.write_admin_kubeconfig(workdir / "host.kubeconfig"), names,
                    not_ready_taints(admin))
    finally:
        heartbeats.stop()
        for name in names:
            admin.delete("v1", "Node", name)
            admin.delete(LEASE_API, "Lease", name, LEASE_NAMESPACE)
        for client in (kubelet, kubectl):
            client.close()
        admin.close()


# ----- the portal's side, fresh per test


@dataclass
class Portal:
    database: Database
    connector: RecordingConnector
    reconciler: NodeReconciler
    now: list[float]  # the reconciler's clock, for its retry delays

    def run(self) -> list[tuple[str, str, str]]:
        """One pass; what it wrote (or tried to write) to the host."""
        self.connector.forget()
        self.reconciler.run_due("worker-1")
        return list(self.connector.writes)

    def later(self, seconds: float) -> None:
        self.now[0] += seconds

    @property
    def host(self) -> RecordingPort:
        assert self.connector.port is not None
        return self.connector.port


@pytest.fixture
def portal(fleet: Fleet, database: Database) -> Portal:
    settings = Settings(env="test", database_url="sqlite://", rack_label=RACK_LABEL,
                        worker_resync_seconds=0, kubeconfig=str(fleet.kubeconfig))
    connector = RecordingConnector(ClientConnector(settings))
    now = [1000.0]
    reconciler = NodeReconciler(settings, database, connector, clock=lambda: now[0])
    return Portal(database, connector, reconciler, now)


def assign(db: Session, node_name: str) -> tuple[NodeAssignment, str]:
    """Dedicate a node to a new tenant (unique slug: the server is shared by the run)."""
    tenant = factories.tenant(db, f"rn-{secrets.token_hex(3)}")
    node = db.scalar(select(Node).where(Node.name == node_name))
    assert node is not None, f"{node_name} is not in the inventory"
    row = factories.assignment(db, node, tenant)
    db.commit()
    return row, tenant.slug


def end(db: Session, assignment: NodeAssignment) -> None:
    assignment.ended_at = utcnow()
    db.commit()


def tenant_taint(slug: str) -> dict[str, str]:
    return {"key": lbl.TENANT, "value": slug, "effect": "NoSchedule"}


def gpu_class(db: Session, product: str) -> GpuClass:
    row = db.scalar(select(GpuClass).where(GpuClass.product == product))
    assert row is not None, f"no GPU class {product}"
    return row


# ----- the tests


def test_the_inventory_matches_the_reference_fleet(
    fleet: Fleet, portal: Portal, db: Session
) -> None:
    assert portal.run() == []
    nodes = {row.name: row for row in db.scalars(select(Node))}
    assert sorted(nodes) == sorted(name for name in fleet.names if name != "cpu-n1")
    assert [name for name, row in nodes.items() if not row.ready] == ["h100-r2-n4"]
    h100 = capacity(db, gpu_class(db, H100).id)
    assert (h100.total, h100.not_ready) == (64, 8)
    assert {nodes[f"h100-r{r}-n1"].rack for r in (1, 2)} == {"rack-1", "rack-2"}
    gb200 = capacity(db, gpu_class(db, GB200).id)
    assert gb200.total == 16
    assert {nodes[f"gb200-c1-n{i}"].clique for i in range(1, 5)} == {
        "2f1c9a3e-7b4d-4c1e-9f0a-1d2e3f4a5b6c.1"}
    assert capacity(db, gpu_class(db, L40S).id).total == 12
    mig = capacity(db, gpu_class(db, A100).id)
    assert mig.total == 0  # MIG slices are never counted as whole GPUs
    assert mig.mig_resources == {"nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 4,
                                 "nvidia.com/mig-7g.80gb": 2}
    assert nodes["h100-r2-n4"].taints == fleet.controller_taints
    assert {t["effect"] for t in fleet.controller_taints} == {"NoSchedule", "NoExecute"}
    assert portal.run() == []


def test_an_assignment_labels_and_taints_the_node_and_ending_it_removes_both(
    fleet: Fleet, portal: Portal, db: Session
) -> None:
    maintenance = {"key": "example.com/maintenance", "effect": "NoSchedule"}
    fleet.kubectl.merge_patch("v1", "Node", "h100-r1-n1", None, {
        "metadata": {"labels": {"team": "ops"}}, "spec": {"taints": [maintenance]}})
    try:
        portal.run()
        before = fleet.node("h100-r1-n1")
        assignment, slug = assign(db, "h100-r1-n1")

        assert portal.run() == [("apply", "Node", "h100-r1-n1")]
        node = fleet.node("h100-r1-n1")
        assert node["metadata"]["labels"] == {**before["metadata"]["labels"], lbl.TENANT: slug}
        assert node["spec"]["taints"] == [maintenance, tenant_taint(slug)]
        assert lbl.TENANT not in fleet.node("h100-r1-n2")["metadata"]["labels"]
        assert portal.run() == []
        assert fleet.node("h100-r1-n1")["metadata"]["resourceVersion"] == (
            node["metadata"]["resourceVersion"])

        end(db, assignment)
        assert portal.run() == [("apply", "Node", "h100-r1-n1")]
        released = fleet.node("h100-r1-n1")
        assert released["metadata"]["labels"] == before["metadata"]["labels"]
        assert released["spec"]["taints"] == [maintenance]
        assert portal.run() == []
    finally:
        fleet.kubectl.merge_patch("v1", "Node", "h100-r1-n1", None, {
            "metadata": {"labels": {"team": None}}, "spec": {"taints": None}})


def test_the_not_ready_node_keeps_the_lifecycle_controllers_taint(
    fleet: Fleet, portal: Portal, db: Session
) -> None:
    portal.run()
    assignment, slug = assign(db, "h100-r2-n4")

    assert portal.run() == [("apply", "Node", "h100-r2-n4")]
    assert fleet.node("h100-r2-n4")["spec"]["taints"] == [*fleet.controller_taints,
                                                          tenant_taint(slug)]
    assert portal.run() == []

    end(db, assignment)
    assert portal.run() == [("apply", "Node", "h100-r2-n4")]
    released = fleet.node("h100-r2-n4")
    assert released["spec"]["taints"] == fleet.controller_taints
    assert lbl.TENANT not in released["metadata"]["labels"]
    assert portal.run() == []


def test_a_tenant_label_removed_by_hand_comes_back(
    fleet: Fleet, portal: Portal, db: Session
) -> None:
    portal.run()
    assignment, slug = assign(db, "gb200-c1-n2")
    portal.run()
    fleet.kubectl.merge_patch("v1", "Node", "gb200-c1-n2", None,
                              {"metadata": {"labels": {lbl.TENANT: None}}})

    assert portal.run() == [("apply", "Node", "gb200-c1-n2")]
    labels = fleet.node("gb200-c1-n2")["metadata"]["labels"]
    assert labels[lbl.TENANT] == slug
    assert labels[lbl.GPU_PRODUCT] == GB200
    assert portal.run() == []

    end(db, assignment)
    portal.run()
    assert lbl.TENANT not in fleet.node("gb200-c1-n2")["metadata"]["labels"]


def test_a_taint_added_between_the_listing_and_the_apply_is_not_lost(
    fleet: Fleet, portal: Portal, db: Session
) -> None:
    health = {"key": "example.com/gpu-health", "effect": "NoSchedule"}
    portal.run()
    assignment, slug = assign(db, "l40s-n1")
    # another controller taints the node after the portal listed it, before it applies
    portal.host.before_apply.append(lambda: fleet.kubectl.merge_patch(
        "v1", "Node", "l40s-n1", None, {"spec": {"taints": [health]}}))
    try:
        # the apply names the resourceVersion it read: the server refuses it (409)
        assert portal.run() == [("apply", "Node", "l40s-n1")]
        refused = fleet.node("l40s-n1")
        assert refused["spec"]["taints"] == [health]
        assert lbl.TENANT not in refused["metadata"]["labels"]

        assert portal.run() == []  # backing off
        portal.later(5)
        assert portal.run() == [("apply", "Node", "l40s-n1")]
        node = fleet.node("l40s-n1")
        assert node["spec"]["taints"] == [health, tenant_taint(slug)]
        assert node["metadata"]["labels"][lbl.TENANT] == slug
    finally:
        end(db, assignment)
        portal.run()
        fleet.kubectl.merge_patch("v1", "Node", "l40s-n1", None, {"spec": {"taints": None}})
    assert fleet.node("l40s-n1")["spec"].get("taints") is None
