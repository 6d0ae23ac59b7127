"""Writes the allocation ledger in the same transaction as the change it records.

Quotas, nodes and clusters must not know about usage, so the ledger watches their rows through
SQLAlchemy session events: after every flush (API, web, reconciler, expiry job alike) and around
every bulk UPDATE or DELETE of a watched table. Either way the subject's current allocation is
read and compared with its last ledger entry; a difference appends one entry. Comparing with the
ledger rather than with the row's previous values also repairs a ledger that missed a change.
A virtual cluster is two series: what it holds (``cluster``) and, while the worker has it
asleep (``asleep_since``), what of that sleep gave back to the pool (``sleep``).

A holding is in its subject's unit (app.kit.gpu_units): ``amount`` whole GPUs (``gpus`` too),
slices of ``mig_profile``, or hundredths of one GPU (``gpus`` 0 on the latter two), and a series
is keyed by unit and profile as well. Amounts stay integers: a share's GPU-seconds are
``amount`` times seconds, divided by 100 only when a report turns them into hours.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Delete, Table, Update, event, func, insert, inspect, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction

from app.clusters.models import VirtualCluster
from app.database.core import utcnow
from app.database.prepared import on_row_inserted
from app.nodes.models import Node, NodeAssignment
from app.quotas.models import TenantQuota
from app.usage.models import LedgerEntry

# The columns whose change can change what a subject holds; others (leases, conditions) cannot.
_TRACKED: dict[type[Any], frozenset[str]] = {
    TenantQuota: frozenset({"gpus", "tenant_id", "gpu_class_id", "unit", "mig_profile",
                            "amount"}),
    VirtualCluster: frozenset({"gpus", "tenant_id", "gpu_class_id", "deletion_requested_at",
                               "name", "asleep_since", "unit", "mig_profile", "amount"}),
    NodeAssignment: frozenset({"ended_at", "tenant_id", "node_id"}),
    Node: frozenset({"gpu_count", "gpu_class_id", "gone_at"}),
}


@dataclass(frozen=True)
class Holding:
    """What one subject holds of one (tenant, class) now: ``amount`` of ``unit`` (whole GPUs,
    then also ``gpus``; slices of ``mig_profile``; hundredths of a GPU)."""

    tenant_id: int
    gpu_class_id: int
    gpus: int
    cluster_id: int | None = None
    cluster_name: str = ""
    node_id: int | None = None
    placement: str | None = None
    unit: str = "gpu"
    mig_profile: str = ""
    amount: int | None = None  # None: ``gpus`` (whole GPUs)

    @property
    def held(self) -> int:
        """In the unit's steps: whole GPUs, slices, or hundredths."""
        return self.gpus if self.amount is None or self.unit == "gpu" else self.amount

    @property
    def key(self) -> Series:
        return self.tenant_id, self.gpu_class_id, self.unit, self.mig_profile


Subject = tuple[str, int]  # (kind, subject id)
# A subject's series: (tenant id, class id, unit, MIG profile).
Series = tuple[int, int, str, str]
# The ledger's last (gpus, amount) of each series of a subject.
Levels = Mapping[Series, tuple[int, int]]
# A virtual cluster is two subjects: what it holds, and what of that sleep has freed.
CLUSTER_KINDS = ("cluster", "sleep")


def now_in_seconds() -> datetime:
    """The ledger's clock, whole seconds: entries and their ``at_s`` then agree exactly."""
    return utcnow().replace(microsecond=0)


# ----- current holdings, read from rows


def _quota_holdings(row: Any) -> list[Holding]:
    """A quota (a mapped row or a selected one) in its unit."""
    if row is None:
        return []
    return [Holding(row.tenant_id, row.gpu_class_id, row.gpus, unit=row.unit or "gpu",
                    mig_profile=row.mig_profile or "", amount=row.amount)]


def _cluster_holdings(kind: str, row: Any) -> list[Holding]:
    """What a cluster (a mapped row or a selected one) holds as ``cluster`` or ``sleep``."""
    if row is None or row.gpu_class_id is None:
        return []
    # A deletion request ends the allocation: the tenant no longer has the use of it.
    held = row.deletion_requested_at is None
    if kind == "sleep":
        held = held and _freed_by_sleep(row)
    return [Holding(row.tenant_id, row.gpu_class_id, row.gpus if held else 0,
                    cluster_id=row.id, cluster_name=row.name, placement=row.placement,
                    unit=row.unit or "gpu", mig_profile=row.mig_profile or "",
                    amount=(row.amount or 0) if held else 0)]


def _freed_by_sleep(row: Any) -> bool:
    """Asleep on the host: a shared-pool cluster's guarantee is the pool's again (dedicated
    nodes stay the tenant's, asleep or not)."""
    return bool(row.asleep_since is not None and row.placement == "shared-pool")


def _assignment_holdings(connection: Connection, assignment_id: int) -> list[Holding]:
    query = (select(NodeAssignment.tenant_id, NodeAssignment.ended_at, Node.id, Node.gpu_class_id,
                    Node.gpu_count, Node.gone_at)
             .join(Node, Node.id == NodeAssignment.node_id)
             .where(NodeAssignment.id == assignment_id))
    row = connection.execute(query).one_or_none()
    if row is None or row.gpu_class_id is None:
        return []
    held = row.ended_at is None and row.gone_at is None
    return [Holding(row.tenant_id, row.gpu_class_id, row.gpu_count if held else 0,
                    node_id=row.id)]


def _current(connection: Connection, kind: str, subject_id: int) -> list[Holding]:
    if kind == "quota":
        quota = connection.execute(
            select(TenantQuota.id, TenantQuota.tenant_id, TenantQuota.gpu_class_id,
                   TenantQuota.gpus, TenantQuota.unit, TenantQuota.mig_profile,
                   TenantQuota.amount).where(TenantQuota.id == subject_id)).one_or_none()
        return _quota_holdings(quota)
    if kind in CLUSTER_KINDS:
        cluster = connection.execute(
            select(VirtualCluster.__table__).where(VirtualCluster.id == subject_id)
        ).one_or_none()
        return _cluster_holdings(kind, cluster)
    return _assignment_holdings(connection, subject_id)


# ----- comparing with the ledger


def _last_levels(connection: Connection, kind: str,
                 subject_id: int) -> dict[Series, tuple[int, int]]:
    latest = (select(func.max(LedgerEntry.id))
              .where(LedgerEntry.kind == kind, LedgerEntry.subject_id == subject_id)
              .group_by(LedgerEntry.tenant_id, LedgerEntry.gpu_class_id, LedgerEntry.unit,
                        LedgerEntry.mig_profile))
    rows = connection.execute(
        select(LedgerEntry.tenant_id, LedgerEntry.gpu_class_id, LedgerEntry.unit,
               LedgerEntry.mig_profile, LedgerEntry.gpus, LedgerEntry.amount)
        .where(LedgerEntry.id.in_(latest)))
    return {(row.tenant_id, row.gpu_class_id, row.unit, row.mig_profile): (row.gpus, row.amount)
            for row in rows}


def _entries(kind: str, subject_id: int, holdings: Iterable[Holding],
             last: Levels, at: datetime) -> list[dict[str, Any]]:
    entries = []
    current = {h.key: h for h in holdings}
    for key in sorted({*current, *last}):
        tenant_id, class_id, unit, profile = key
        holding = current.get(key) or Holding(tenant_id, class_id, 0, unit=unit,
                                              mig_profile=profile, amount=0)
        if (holding.gpus, holding.held) == last.get(key, (0, 0)):
            continue
        entries.append({
            "at": at, "at_s": int(at.timestamp()), "kind": kind, "subject_id": subject_id,
            "tenant_id": tenant_id, "gpu_class_id": class_id, "gpus": holding.gpus,
            "unit": unit, "mig_profile": profile, "amount": holding.held,
            "cluster_id": holding.cluster_id if kind in CLUSTER_KINDS else None,
            "cluster_name": holding.cluster_name, "node_id": holding.node_id,
            "placement": holding.placement if kind == "cluster" else None,
        })
    return entries


_ADD_ENTRIES = insert(LedgerEntry)


def record(connection: Connection, changes: Mapping[Subject, list[Holding] | None],
           new: Collection[Subject] = ()) -> int:
    """Appends an entry for each (tenant, class, unit, profile) whose holding differs from the
    ledger's last.

    ``None`` as a subject's holdings means: read them from the database now. Subjects in
    ``new`` were inserted by this flush: the ledger has nothing of them to compare with.
    """
    at = now_in_seconds()
    rows = []
    for (kind, subject_id), holdings in sorted(changes.items()):
        current = _current(connection, kind, subject_id) if holdings is None else holdings
        last = {} if (kind, subject_id) in new else _last_levels(connection, kind, subject_id)
        rows += _entries(kind, subject_id, current, last, at)
    if rows:
        connection.execute(_ADD_ENTRIES, rows)
    return len(rows)


# ----- which subjects a flush or a bulk statement touched


def _changed(row: object) -> bool:
    state = inspect(row)
    return any(state.attrs[name].history.has_changes() for name in _TRACKED[type(row)])


def _active_assignments(connection: Connection, node_ids: Iterable[int]) -> list[int]:
    query = select(NodeAssignment.id).where(NodeAssignment.node_id.in_(list(node_ids)),
                                            NodeAssignment.ended_at.is_(None))
    return list(connection.scalars(query))


def _subjects_of_rows(session: Session) -> dict[Subject, list[Holding] | None]:
    changes: dict[Subject, list[Holding] | None] = {}
    nodes: set[int] = set()
    for row in (*session.new, *session.dirty):
        if type(row) not in _TRACKED or (row not in session.new and not _changed(row)):
            continue
        if isinstance(row, TenantQuota):
            changes[("quota", row.id)] = _quota_holdings(row)
        elif isinstance(row, VirtualCluster):
            changes.update({(kind, row.id): _cluster_holdings(kind, row)
                            for kind in CLUSTER_KINDS})
        elif isinstance(row, NodeAssignment):
            changes[("node", row.id)] = None
        elif isinstance(row, Node):
            nodes.add(row.id)
    for row in session.deleted:
        if isinstance(row, TenantQuota):
            changes[("quota", row.id)] = []
        elif isinstance(row, VirtualCluster):
            changes.update({(kind, row.id): [] for kind in CLUSTER_KINDS})
        elif isinstance(row, NodeAssignment):
            changes[("node", row.id)] = []
    if nodes:
        for assignment_id in _active_assignments(session.connection(), nodes):
            changes.setdefault(("node", assignment_id), None)
    return changes


def _new_clusters(session: Session) -> set[Subject]:
    """The subjects of clusters this flush inserted (a reused SQLite id's ledger ends at 0)."""
    return {(kind, row.id) for row in session.new if isinstance(row, VirtualCluster)
            for kind in CLUSTER_KINDS}


@event.listens_for(Session, "after_flush")
def _record_flushed_changes(session: Session, _flush: UOWTransaction) -> None:
    changes = _subjects_of_rows(session)
    if changes:
        record(session.connection(), changes, _new_clusters(session))


_TRACKED_TABLES: dict[Table, type[Any]] = {model.__table__: model for model in _TRACKED}


@on_row_inserted
def _record_inserted_row(session: Session, table: Table, row: Any) -> None:
    """A row a ``PreparedInsert`` added, as ``_record_flushed_changes`` would have seen it."""
    model = _TRACKED_TABLES.get(table)
    if model is None or model is Node:  # a new node has no assignment yet
        return
    if row is None:
        raise ValueError(f"the usage ledger needs the {table.name} row added: return its columns")
    if model is VirtualCluster:
        added = {(kind, row.id): _cluster_holdings(kind, row) for kind in CLUSTER_KINDS}
        record(session.connection(), added, new=set(added))
    elif model is TenantQuota:
        record(session.connection(), {("quota", row.id): _quota_holdings(row)})
    else:
        record(session.connection(), {("node", row.id): None})


def _assigned_columns(statement: Update) -> set[str] | None:
    """The columns an UPDATE sets, or None where the statement does not say (then: any)."""
    values = getattr(statement, "_values", None) or dict(
        getattr(statement, "_ordered_values", None) or ())
    if not values:
        return None
    return {str(getattr(key, "key", key)) for key in values}


def _bulk_targets(state: ORMExecuteState) -> tuple[type[Any], list[int]] | None:
    """The watched rows a bulk UPDATE or DELETE is about to touch (read before it runs)."""
    if not (state.is_update or state.is_delete) or state.bind_mapper is None:
        return None
    model = state.bind_mapper.class_
    statement = state.statement
    if model not in _TRACKED or not isinstance(statement, Update | Delete):
        return None
    if isinstance(statement, Update):
        assigned = _assigned_columns(statement)
        if assigned is not None and not assigned & _TRACKED[model]:
            return None
    query = select(inspect(model).primary_key[0])
    if statement.whereclause is not None:
        query = query.where(statement.whereclause)
    return model, list(state.session.connection().scalars(query))


def _subjects_of_ids(connection: Connection, model: type[Any],
                     ids: list[int]) -> dict[Subject, list[Holding] | None]:
    if model is Node:
        return {("node", a): None for a in _active_assignments(connection, ids)}
    if model is VirtualCluster:
        return {(kind, row_id): None for kind in CLUSTER_KINDS for row_id in ids}
    kind = {TenantQuota: "quota", NodeAssignment: "node"}[model]
    return {(kind, row_id): None for row_id in ids}


@event.listens_for(Session, "do_orm_execute")
def _record_bulk_changes(state: ORMExecuteState) -> Any:
    targets = _bulk_targets(state)
    if not targets or not targets[1]:
        return None
    model, ids = targets
    connection = state.session.connection()
    # A node's assignments must be found while the node still has them.
    before = _subjects_of_ids(connection, model, ids) if model is Node else {}
    result = state.invoke_statement()
    changes = {**before, **_subjects_of_ids(connection, model, ids)}
    record(connection, changes)
    return result
