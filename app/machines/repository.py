"""SQL for bare-metal machines."""

from __future__ import annotations

from sqlalchemy import select
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
