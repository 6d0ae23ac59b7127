"""The inventory sync and the node reconciler on the reference fleet, registered on a real
kube-apiserver whose controller-manager runs the node lifecycle controller.

The reference nodes are registered as kubelets register them (created, then their status
written through the ``nodes/{name}/status`` subresource, as another field manager than the
portal) and kept alive by Lease heartbeats, as kubelets keep them. The NotReady node gets the
lifecycle controller's ``node.kubernetes.io/not-ready`` taint: a taint of someone else's that a
tenant assignment must leave in place.
"""

from __future__ import annotations

import secrets

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.database.core import utcnow
from app.gpu_classes.models import GpuClass
from app.gpu_classes.service import capacity
from app.kube.manifests import labels as lbl
from app.nodes.models import Node, NodeAssignment
from tests import factories
from tests.nodes.conftest import Fleet, Portal, untimed

pytestmark = pytest.mark.kube_server

H100, GB200, L40S, A100 = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-GB200", "NVIDIA-L40S",
                           "NVIDIA-A100-SXM4-80GB")


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
    gpu_nodes = {name for name in fleet.names if name != "cpu-n1"}
    # The first pass of a worker on this server puts the shared pool's label on every GPU node
    # dedicated to nobody; a worker before it (another test of the package) may have done so.
    assert {(method, kind) for method, kind, _ in portal.run()} <= {("apply", "Node")}
    assert {name for name in fleet.names
            if fleet.node(name)["metadata"]["labels"].get(lbl.POOL) == "shared"} == gpu_nodes
    nodes = {row.name: row for row in db.scalars(select(Node))}
    assert set(nodes) == gpu_nodes
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
    assert untimed(nodes["h100-r2-n4"].taints) == untimed(fleet.controller_taints)
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
        assert before["metadata"]["labels"][lbl.POOL] == lbl.POOL_SHARED
        pooled = {k: v for k, v in before["metadata"]["labels"].items() if k != lbl.POOL}
        assert node["metadata"]["labels"] == {**pooled, lbl.TENANT: slug}
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
    assert untimed(fleet.node("h100-r2-n4")["spec"]["taints"]) == untimed(
        [*fleet.controller_taints, tenant_taint(slug)])
    assert portal.run() == []

    end(db, assignment)
    assert portal.run() == [("apply", "Node", "h100-r2-n4")]
    released = fleet.node("h100-r2-n4")
    assert untimed(released["spec"]["taints"]) == untimed(fleet.controller_taints)
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
        # The apply names the resourceVersion it listed: the server refuses it (409). The
        # portal reads that node again and applies on what it holds now, in the same pass.
        assert portal.run() == [("apply", "Node", "l40s-n1"), ("apply", "Node", "l40s-n1")]
        assert ("get", "Node", "l40s-n1") in portal.connector.calls
        node = fleet.node("l40s-n1")
        assert node["spec"]["taints"] == [health, tenant_taint(slug)]
        assert node["metadata"]["labels"][lbl.TENANT] == slug
        assert portal.run() == []
    finally:
        end(db, assignment)
        portal.run()
        fleet.kubectl.merge_patch("v1", "Node", "l40s-n1", None, {"spec": {"taints": None}})
    assert fleet.node("l40s-n1")["spec"].get("taints") is None
