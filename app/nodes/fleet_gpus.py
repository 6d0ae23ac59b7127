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
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import case, event, func, select
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction

from app.hosts.models import HostCluster
from app.nodes.models import Node, NodeAssignment

MAX_AGE_SECONDS = 2.0

# (host, class) -> (GPUs on live nodes, of those on nodes dedicated to a tenant)
PerHostAndClass = dict[tuple[int, int], tuple[int, int]]

_kept: WeakKeyDictionary[object, tuple[float, PerHostAndClass]] = WeakKeyDictionary()
_CHANGED = "fleet_gpus.changed"
_WATCHED = (Node, NodeAssignment, HostCluster)


def per_host_and_class(db: Session,
                       clock: Callable[[], float] = time.monotonic) -> PerHostAndClass:
    """The sums, as read at most ``MAX_AGE_SECONDS`` ago; read now if the session has changed
    what they count without committing it yet (that is not for other requests to see)."""
    if db.info.get(_CHANGED):
        return summed(db)
    bind = db.get_bind()
    now = clock()
    hit = _kept.get(bind)
    if hit is not None and now - hit[0] < MAX_AGE_SECONDS:
        return hit[1]
    figures = summed(db)
    _kept[bind] = (now, figures)
    return figures


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


def forget(session: Session) -> None:
    _kept.pop(session.get_bind(), None)


@event.listens_for(Session, "after_flush")
def _forget_flushed_changes(session: Session, _flush: UOWTransaction) -> None:
    touched = (*session.new, *session.dirty, *session.deleted)
    if any(isinstance(row, _WATCHED) for row in touched):
        _note_change(session)


@event.listens_for(Session, "do_orm_execute")
def _forget_bulk_changes(state: ORMExecuteState) -> None:
    mapper = state.bind_mapper
    if (state.is_update or state.is_delete or state.is_insert) and mapper is not None \
            and issubclass(mapper.class_, _WATCHED):
        _note_change(state.session)


def _note_change(session: Session) -> None:
    session.info[_CHANGED] = True
    forget(session)


@event.listens_for(Session, "after_commit")
def _forget_on_commit(session: Session) -> None:
    # A request that summed between this session's flush and its commit kept the old figures.
    if session.info.pop(_CHANGED, False):
        forget(session)


@event.listens_for(Session, "after_soft_rollback")
def _nothing_changed(session: Session, _previous: Any) -> None:
    session.info.pop(_CHANGED, None)
