"""The node reconciler: labels and taints dedicated nodes, removes both when the assignment
ends, repairs drift, touches nothing it does not own, and a second run changes nothing. The
runtime schedules it: an assignment made or ended is due at once, a failed patch is retried
through the queue."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.database.core import Database, utcnow
from app.gpu_classes.models import GpuClass
from app.kube.errors import ApplyConflictError, TransientKubeError
from app.kube.manifests import labels as lbl
from app.nodes import service
from app.nodes.models import Node, NodeAssignment
from app.nodes.schemas import AssignmentIn
from app.reconcilers.nodes import needs_patch
from app.workqueue import NODES, enqueue
from app.workqueue.models import WorkItem
from app.workqueue.repository import items
from tests import factories
from tests.nodes.conftest import RESYNC_SECONDS, Synced, reconciler
from tests.support.drive import run_due

TAINT = {"key": lbl.TENANT, "value": "acme", "effect": "NoSchedule"}


def _host_node(synced: Synced, name: str) -> dict[str, Any]:
    found = synced.kube.get("v1", "Node", name)
    assert found is not None
    return found


def _assign(db: Session, name: str, slug: str = "acme") -> NodeAssignment:
    tenant = factories.tenant(db, slug)
    node = db.scalar(select(Node).where(Node.name == name))
    assert node is not None
    row = factories.assignment(db, node, tenant)
    enqueue(db, NODES, node.host_cluster_id)  # as the nodes service does
    db.commit()
    return row


def _end(db: Session, assignment: NodeAssignment) -> None:
    assignment.ended_at = utcnow()
    node = db.get(Node, assignment.node_id)
    assert node is not None
    enqueue(db, NODES, node.host_cluster_id)  # as the nodes service does
    db.commit()


def _item(database: Database) -> WorkItem:
    with database.session() as db:
        [item] = items(db, NODES)
        return item


def _run_twice(synced: Synced) -> int:
    """First run converges; the second, at the resync, must write nothing. The nodes the first
    wrote."""
    synced.kube.reset_calls()
    assert run_due(synced.reconciler, "test") == 1
    written = len(synced.kube.writes())
    synced.kube.reset_calls()
    assert synced.resync() == 1
    assert synced.kube.writes() == [] and synced.kube.mutations() == []
    return written


def test_a_converged_fleet_costs_one_list_and_no_writes(synced: Synced) -> None:
    assert synced.resync() == 1
    assert [call.method for call in synced.kube.calls] == ["list"]


def test_an_assigned_node_is_labelled_and_tainted(synced: Synced, db: Session) -> None:
    before = _host_node(synced, "h100-r1-n1")
    _assign(db, "h100-r1-n1")
    assert _run_twice(synced) == 1
    node = _host_node(synced, "h100-r1-n1")
    assert node["metadata"]["labels"][lbl.TENANT] == "acme"
    assert node["spec"]["taints"] == [TAINT]
    # it leaves the shared pool; every other label stays as GPU Feature Discovery wrote it
    assert before["metadata"]["labels"][lbl.POOL] == lbl.POOL_SHARED
    assert lbl.POOL not in node["metadata"]["labels"]
    others = {k: v for k, v in node["metadata"]["labels"].items() if k != lbl.TENANT}
    assert others == {k: v for k, v in before["metadata"]["labels"].items() if k != lbl.POOL}
    untouched = _host_node(synced, "h100-r1-n2")
    assert lbl.TENANT not in untouched["metadata"]["labels"]
    assert untouched["metadata"]["labels"][lbl.POOL] == lbl.POOL_SHARED


def test_ending_the_assignment_removes_label_and_taint_only(synced: Synced, db: Session) -> None:
    node = _host_node(synced, "h100-r1-n1")
    node["spec"]["taints"] = [{"key": "example.com/maintenance", "effect": "NoSchedule"}]
    synced.kube.seed(node)
    assignment = _assign(db, "h100-r1-n1")
    run_due(synced.reconciler, "test")
    assert _host_node(synced, "h100-r1-n1")["spec"]["taints"] == [
        {"key": "example.com/maintenance", "effect": "NoSchedule"}, TAINT]
    _end(db, assignment)
    assert _run_twice(synced) == 1
    released = _host_node(synced, "h100-r1-n1")
    assert lbl.TENANT not in released["metadata"]["labels"]
    assert released["spec"]["taints"] == [{"key": "example.com/maintenance",
                                           "effect": "NoSchedule"}]
    assert released["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_a_label_removed_by_hand_comes_back_on_resync(synced: Synced, db: Session) -> None:
    _assign(db, "gb200-c1-n2")
    run_due(synced.reconciler, "test")
    drifted = _host_node(synced, "gb200-c1-n2")
    del drifted["metadata"]["labels"][lbl.TENANT]
    drifted["metadata"]["labels"]["team"] = "ops"  # someone else's label, kept
    synced.kube.seed(drifted)
    assert run_due(synced.reconciler, "test") == 0  # not due before the resync
    synced.clock.later(RESYNC_SECONDS)
    assert _run_twice(synced) == 1
    repaired = _host_node(synced, "gb200-c1-n2")["metadata"]["labels"]
    assert (repaired[lbl.TENANT], repaired["team"]) == ("acme", "ops")


def test_a_wrong_tenant_label_set_by_hand_is_overwritten(synced: Synced, db: Session) -> None:
    _assign(db, "l40s-n1")
    tampered = _host_node(synced, "l40s-n1")
    tampered["metadata"]["labels"][lbl.TENANT] = "globex"
    synced.kube.seed(tampered)
    assert _run_twice(synced) == 1
    assert _host_node(synced, "l40s-n1")["metadata"]["labels"][lbl.TENANT] == "acme"


def test_an_assignment_is_picked_up_before_the_resync_period(synced: Synced, db: Session
                                                              ) -> None:
    """Assigning and ending through the nodes service enqueue the host's key in the same
    transaction: due at once, not at the (here hour-long) resync."""
    slow = reconciler(synced.database, synced.kube, resync_seconds=3600, clock=synced.clock)
    assert run_due(slow, "test") == 0  # the fixture's pass left the host due at its resync
    assert synced.kube.calls == []  # nothing changed, nothing due: no API call at all
    admin = Principal(user=factories.user(db, admin=True), via="token")
    acme = factories.tenant(db, "acme")
    h100 = db.scalar(select(GpuClass).where(GpuClass.product == "NVIDIA-H100-80GB-HBM3"))
    assert h100 is not None
    factories.quota(db, acme, h100, gpus=8)
    service.assign_node(db, admin, "h100-r2-n1", AssignmentIn(tenant="acme"))
    db.commit()
    assert _item(synced.database).due_at <= synced.clock()
    assert run_due(slow, "test") == 1
    assert _host_node(synced, "h100-r2-n1")["metadata"]["labels"][lbl.TENANT] == "acme"
    assert run_due(slow, "test") == 0

    service.end_assignment(db, admin, "h100-r2-n1")
    db.commit()
    assert run_due(slow, "test") == 1
    assert lbl.TENANT not in _host_node(synced, "h100-r2-n1")["metadata"]["labels"]


def test_a_failed_apply_is_retried_after_the_servers_delay(synced: Synced, db: Session
                                                            ) -> None:
    loop, clock = synced.reconciler, synced.clock
    _assign(db, "h100-r1-n3")
    synced.kube.inject("apply", TransientKubeError("throttled", delay_seconds=30.0))
    assert run_due(loop, "test") == 1  # tried, and failed
    failed = _item(synced.database)
    assert failed.attempts == 1 and "throttled" in (failed.last_error or "")
    assert failed.due_at >= clock() + timedelta(seconds=29)
    clock.later(10)
    assert run_due(loop, "test") == 0  # still backing off: the node is left alone
    assert lbl.TENANT not in _host_node(synced, "h100-r1-n3")["metadata"]["labels"]
    clock.later(25)
    assert run_due(loop, "test") == 1
    assert _host_node(synced, "h100-r1-n3")["metadata"]["labels"][lbl.TENANT] == "acme"
    done = _item(synced.database)
    assert (done.attempts, done.last_error) == (0, None)


def test_a_node_changed_since_the_listing_is_read_again_and_patched_in_the_same_pass(
        synced: Synced, db: Session) -> None:
    loop = synced.reconciler
    _assign(db, "h100-r1-n3")
    synced.kube.inject("apply", ApplyConflictError("the object has been modified"))
    assert run_due(loop, "test") == 1
    assert _host_node(synced, "h100-r1-n3")["metadata"]["labels"][lbl.TENANT] == "acme"
    assert _item(synced.database).attempts == 0

    _assign(db, "h100-r1-n4", "globex")  # changed again before the second apply: back off
    synced.kube.inject("apply", ApplyConflictError("the object has been modified"), times=2)
    assert run_due(loop, "test") == 1
    assert lbl.TENANT not in _host_node(synced, "h100-r1-n4")["metadata"]["labels"]
    assert _item(synced.database).attempts == 1
    assert run_due(loop, "test") == 0  # backing off
    synced.clock.later(5)
    assert run_due(loop, "test") == 1
    assert _host_node(synced, "h100-r1-n4")["metadata"]["labels"][lbl.TENANT] == "globex"


def test_the_inventory_records_what_the_host_carries(synced: Synced, db: Session) -> None:
    _assign(db, "h100-r1-n4")
    run_due(synced.reconciler, "test")
    db.expire_all()
    row = db.scalar(select(Node).where(Node.name == "h100-r1-n4"))
    assert row is not None and row.labels[lbl.TENANT] == "acme" and row.taints == [TAINT]


def test_needs_patch_compares_only_our_keys() -> None:
    other = {"key": "example.com/x", "effect": "NoExecute"}
    pool = {lbl.POOL: lbl.POOL_SHARED}
    assert not needs_patch({"a": "b", **pool}, [other], None)
    assert needs_patch({"a": "b"}, [other], None)  # not labelled into the pool yet
    assert needs_patch({lbl.TENANT: "acme"}, [other], None)
    assert needs_patch({lbl.TENANT: "acme"}, [other], "acme")
    assert not needs_patch({lbl.TENANT: "acme"}, [other, TAINT], "acme")
    assert needs_patch({lbl.TENANT: "acme", **pool}, [other, TAINT], "acme")
