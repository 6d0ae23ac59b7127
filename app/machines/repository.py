"""SQL for bare-metal machines."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.machines.models import Machine


def machine_by_name(db: Session, name: str, *, lock: bool = False) -> Machine | None:
    query = select(Machine).where(Machine.name == name)
    return db.scalar(query.with_for_update() if lock else query)


def machine_by_id(db: Session, machine_id: int, *, lock: bool = False) -> Machine | None:
    query = select(Machine).where(Machine.id == machine_id)
    return db.scalar(query.with_for_update() if lock else query)


def all_machine_ids(db: Session) -> list[int]:
    return list(db.scalars(select(Machine.id).order_by(Machine.id)))


def machine_on_node(db: Session, host_cluster_id: int, node_name: str) -> Machine | None:
    return db.scalar(select(Machine).where(Machine.host_cluster_id == host_cluster_id,
                                           Machine.node_name == node_name))


# ----- private-nodes clusters' machines


def free_machines(db: Session, host_cluster_id: int, gpu_class_id: int) -> list[Machine]:
    """Machines of the class on the host a cluster may be given: largest first."""
    return list(db.scalars(select(Machine).where(
        Machine.host_cluster_id == host_cluster_id, Machine.gpu_class_id == gpu_class_id,
        Machine.cluster_id.is_(None), Machine.desired == "pool", Machine.phase == "available",
        Machine.deleting_at.is_(None)).order_by(Machine.gpu_count.desc(), Machine.id)))


def machines_of_cluster(db: Session, cluster_id: int) -> list[Machine]:
    """Every machine that serves the cluster or is on its way back to the pool from it."""
    return list(db.scalars(select(Machine).where(Machine.cluster_id == cluster_id)
                           .order_by(Machine.id)))


def assign(db: Session, machine_id: int, cluster_id: int, now: datetime) -> bool:
    """Gives the machine to the cluster if, at this instant, it is free: one conditional
    UPDATE, so two clusters (or two workers) racing for it never both get it: PostgreSQL
    re-checks the condition on the row the first one changed, SQLite runs one writer at a
    time. True if this call took it."""
    taken = db.execute(
        update(Machine)
        .where(Machine.id == machine_id, Machine.cluster_id.is_(None),
               Machine.desired == "pool", Machine.phase == "available",
               Machine.deleting_at.is_(None))
        .values(cluster_id=cluster_id, desired="private", assigned_at=now,
                generation=Machine.generation + 1, updated_at=now)
        .returning(Machine.id)
        .execution_options(synchronize_session=False)).scalar()
    return taken is not None


def clear_cluster(db: Session, machine_id: int, now: datetime) -> bool:
    """The machine is back in the pool, wiped: no cluster's any more. Only from there."""
    cleared = db.execute(
        update(Machine)
        .where(Machine.id == machine_id, Machine.cluster_id.is_not(None),
               Machine.desired == "pool", Machine.phase == "available")
        .values(cluster_id=None, assigned_at=None, updated_at=now)
        .returning(Machine.id)
        .execution_options(synchronize_session=False)).scalar()
    return cleared is not None
