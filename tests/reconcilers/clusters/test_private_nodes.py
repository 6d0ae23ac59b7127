"""The cluster kind's part of a private-nodes cluster (issue 57): once its API server answers,
the bootstrap bindings inside it and whole free machines of its class given for its GPUs
(``machine.assigned``, the machines kind told); a cluster being deleted gives them back first
and keeps its row until they are wiped and returned."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.clusters import conditions as cond
from app.clusters import service
from app.database.core import Database
from app.kube.memory import InMemoryKube
from app.machines.models import Machine
from app.workqueue import MACHINES
from app.workqueue.models import WorkItem
from tests import factories
from tests.clusters.support import Harness, create
from tests.support.tenancy import Tenancy


def _machines(db: Session, tenancy: Tenancy) -> None:
    host = factories.env_host(db)
    for index, gpus in enumerate((8, 4, 4)):
        factories.machine(db, host, tenancy.h100, f"h100-{index}", phase="available",
                          gpu_count=gpus)
    db.commit()


def test_whole_machines_are_given_once_the_cluster_answers(
        db: Session, database: Database, tenancy: Tenancy) -> None:
    _machines(db, tenancy)
    harness = Harness.build(database)
    inside = InMemoryKube()
    harness.connector.virtual = lambda kubeconfig: inside  # type: ignore[method-assign,assignment]
    created = create(database, tenancy, placement="private-nodes", gpus=8)
    harness.converge(3)
    with database.session() as db2:
        given = {m.name: (m.desired, m.cluster_id) for m in db2.scalars(select(Machine))}
        due = db2.scalars(select(WorkItem.key).where(WorkItem.kind == MACHINES)).all()
        assigned = db2.scalars(select(AuditEvent.target_label).where(
            AuditEvent.action == "machine.assigned")).all()
    assert given == {"h100-0": ("private", created.id), "h100-1": ("pool", None),
                     "h100-2": ("pool", None)}  # the fewest machines making 8
    assert assigned == ["machine h100-0"] and due
    cluster = harness.cluster(created.id)
    assert cluster is not None
    assert cond.is_true(cluster.conditions, cond.NODE_BOOTSTRAP)
    assert cond.is_true(cluster.conditions, cond.MACHINES_ASSIGNED)
    bindings = {b["metadata"]["name"] for b in inside.objects("ClusterRoleBinding")}
    assert "gpu-tenant-portal:node-bootstrapper" in bindings


def test_a_deleted_cluster_gives_its_machines_back_and_waits_for_them(
        db: Session, database: Database, tenancy: Tenancy) -> None:
    _machines(db, tenancy)
    harness = Harness.build(database)
    harness.connector.virtual = lambda kubeconfig: InMemoryKube()  # type: ignore[method-assign,assignment]
    created = create(database, tenancy, placement="private-nodes", gpus=8)
    harness.converge(3)
    with database.transaction() as db2:
        service.delete_cluster(db2, tenancy.principal(tenancy.acme_admin), "acme", "train")
    harness.converge(2)
    with database.session() as db2:
        row = db2.scalar(select(Machine).where(Machine.name == "h100-0"))
        assert row is not None and (row.desired, row.cluster_id) == ("pool", created.id)
    assert harness.cluster(created.id) is not None  # waits for its machine to be wiped
    with database.transaction() as db2:  # the machines kind: wiped, no cluster's any more
        db2.execute(update(Machine).values(cluster_id=None, assigned_at=None))
    harness.converge(3)
    assert harness.cluster(created.id) is None
