"""The fleet's GPUs per host and class, as placement ranks hosts by them, kept briefly.

Summing them reads every live node and dedicated assignment (about 10 ms of database time at
20,000 nodes), too much for every cluster create. Placement reads the sums at most
``MAX_AGE_SECONDS`` old: a change to nodes, assignments or hosts flushed through this process
forgets them at once, one made by another process (the worker's inventory sync) shows within
``MAX_AGE_SECONDS``. What must be exact is never read from here: the quota's room (under its
lock) and the GPUs on the tenant's dedicated nodes are read afresh by each create. What may lag
is which of the fitting hosts ranks first, and whether a host shows nodes of a class whose
first nodes just joined it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from app.database.kept import Kept
from app.hosts.models import HostCluster
from app.nodes.models import Node, NodeAssignment

MAX_AGE_SECONDS = 2.0

# (host, class) -> (GPUs on live nodes, of those on nodes dedicated to a tenant)
PerHostAndClass = dict[tuple[int, int], tuple[int, int]]


def summed(db: Session) -> PerHostAndClass:
    dedicated = case((NodeAssignment.id.is_not(None), Node.gpu_count), else_=0)
    rows = db.execute(
        select(Node.host_cluster_id, Node.gpu_class_id, func.sum(Node.gpu_count),
               func.sum(dedicated))
        .outerjoin(NodeAssignment, (NodeAssignment.node_id == Node.id)
                   & NodeAssignment.ended_at.is_(None))
        .where(Node.gone_at.is_(None), Node.gpu_class_id.is_not(None))
        .group_by(Node.host_cluster_id, Node.gpu_class_id))
    return {(row[0], row[1] or 0): (int(row[2] or 0), int(row[3] or 0)) for row in rows}


_kept = Kept("fleet_gpus", (Node, NodeAssignment, HostCluster), summed, MAX_AGE_SECONDS)


def per_host_and_class(db: Session,
                       clock: Callable[[], float] = time.monotonic) -> PerHostAndClass:
    """The sums, as read at most ``MAX_AGE_SECONDS`` ago; read now if the session has changed
    what they count without committing it yet (that is not for other requests to see)."""
    return _kept.get(db, clock)


def forget(session: Session) -> None:
    _kept.forget(session)
