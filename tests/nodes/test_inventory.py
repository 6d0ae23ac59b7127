"""Inventory sync: GPU nodes from the host's NodeList, CPU-only nodes ignored, MIG slices kept
apart, vanished nodes marked gone with their assignments intact."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.database.core import Database
from app.gpu_classes.models import GpuClass
from app.gpu_classes.service import capacity
from app.kube.memory import InMemoryKube
from app.nodes.inventory import display_name, read_node
from app.nodes.models import Node, NodeAssignment
from tests import factories
from tests.nodes.conftest import RACK_LABEL, Synced, reconciler, reference_nodes
from tests.support.drive import run_due

H100 = "NVIDIA-H100-80GB-HBM3"


def _by_name(db: Session) -> dict[str, Node]:
    return {n.name: n for n in db.scalars(select(Node))}


def _class(db: Session, product: str) -> GpuClass:
    row = db.scalar(select(GpuClass).where(GpuClass.product == product))
    assert row is not None
    return row


def test_cpu_only_nodes_are_not_gpu_inventory() -> None:
    facts = {n["metadata"]["name"]: read_node(n, RACK_LABEL) for n in reference_nodes()}
    assert facts["cpu-n1"] is None
    assert sum(f is not None for f in facts.values()) == 16


def test_gpu_facts_come_from_gfd_labels_and_allocatable() -> None:
    facts = {n["metadata"]["name"]: read_node(n, RACK_LABEL) for n in reference_nodes()}
    gb200, mig = facts["gb200-c1-n1"], facts["a100-mig-n1"]
    assert gb200 is not None and mig is not None
    assert (gb200.product, gb200.gpus, gb200.memory_mib, gb200.zone, gb200.rack) == (
        "NVIDIA-GB200", 4, 189471, "eu-central-b", "rack-3")
    assert gb200.clique == "2f1c9a3e-7b4d-4c1e-9f0a-1d2e3f4a5b6c.1"
    assert (mig.gpus, mig.physical_gpus, mig.mig_strategy) == (0, 8, "mixed")
    assert mig.mig_resources == {"nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 4,
                                 "nvidia.com/mig-7g.80gb": 2}
    not_ready = facts["h100-r2-n4"]
    assert not_ready is not None and not not_ready.ready
    assert display_name(H100) == "H100 80GB HBM3"


def test_the_rack_label_key_is_configurable() -> None:
    node = reference_nodes()[0]
    node["metadata"]["labels"]["example.com/block"] = "block-7"
    facts = read_node(node, "example.com/block")
    assert facts is not None and facts.rack == "block-7"


def test_sync_builds_classes_and_fleet_totals(synced: Synced, db: Session) -> None:
    nodes = _by_name(db)
    assert len(nodes) == 16 and "cpu-n1" not in nodes
    h100 = _class(db, H100)
    assert (h100.display_name, h100.memory_mib, h100.gpus_per_node) == ("H100 80GB HBM3",
                                                                         81559, 8)
    figures = {product: capacity(db, _class(db, product).id) for product in
               (H100, "NVIDIA-GB200", "NVIDIA-L40S", "NVIDIA-A100-SXM4-80GB")}
    assert (figures[H100].total, figures[H100].ready, figures[H100].not_ready,
            figures[H100].free) == (64, 56, 8, 56)
    assert (figures["NVIDIA-GB200"].total, figures["NVIDIA-L40S"].total) == (16, 12)
    mig = figures["NVIDIA-A100-SXM4-80GB"]
    assert mig.total == 0
    assert mig.mig_resources == {"nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 4,
                                 "nvidia.com/mig-7g.80gb": 2}


def test_a_vanished_node_is_marked_gone_and_keeps_its_assignment(
    synced: Synced, db: Session
) -> None:
    acme = factories.tenant(db, "acme")
    node = _by_name(db)["h100-r1-n1"]
    factories.assignment(db, node, acme)
    db.commit()
    synced.kube.delete("v1", "Node", "h100-r1-n1")
    synced.resync()
    db.expire_all()
    gone = _by_name(db)["h100-r1-n1"]
    assert gone.gone_at is not None
    assert db.scalar(select(NodeAssignment).where(NodeAssignment.node_id == gone.id,
                                                  NodeAssignment.ended_at.is_(None)))
    assert capacity(db, _class(db, H100).id).total == 56
    actions = list(db.scalars(select(AuditEvent.action).where(
        AuditEvent.target_id == "default/h100-r1-n1").order_by(AuditEvent.id)))
    assert actions == ["node.discover", "node.gone"]


def test_a_returning_node_is_the_same_row(synced: Synced, db: Session) -> None:
    before = _by_name(db)["l40s-n1"].id
    [l40s] = [n for n in reference_nodes() if n["metadata"]["name"] == "l40s-n1"]
    synced.kube.delete("v1", "Node", "l40s-n1")
    synced.resync()
    synced.kube.seed(l40s)
    synced.resync()
    db.expire_all()
    back = _by_name(db)["l40s-n1"]
    assert (back.id, back.gone_at) == (before, None)


def test_a_declared_class_is_adopted_by_the_inventory(
    database: Database, db: Session, host_kube: InMemoryKube
) -> None:
    declared = factories.gpu_class(db, "NVIDIA-L40S", display_name="L40S", memory_mib=0,
                                   declared_by_admin=True)
    db.commit()
    run_due(reconciler(database, host_kube), "test")
    db.expire_all()
    assert _class(db, "NVIDIA-L40S").id == declared.id
    assert (declared.display_name, declared.memory_mib, declared.gpus_per_node) == (
        "L40S", 46068, 4)
    assert {n.gpu_class_id for n in _by_name(db).values() if n.name.startswith("l40s")} == {
        declared.id}


def test_no_host_cluster_means_no_sync(database: Database, db: Session) -> None:
    run_due(reconciler(database, None), "test")  # the environment's host has no client
    assert _by_name(db) == {}
