"""SQL for GPU classes and the sums their capacity figures are drawn from (``capacity``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Double,
    Integer,
    Select,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal,
    select,
    true,
    union_all,
)
from sqlalchemy.orm import Session

from app.accounting.read_models import machines
from app.accounting.standing import pool_guarantees
from app.database.prepared import Prepared
from app.gpu_classes.models import GpuClass
from app.gpu_classes.read_models import (
    gpus_in_use,
    node_assignments,
    nodes,
    virtual_clusters,
)
from app.gpu_classes.schemas import NamedClass
from app.hosts.repository import hosts_in
from app.http.pagination import KeysetPage, PageParams
from app.kit.gpu_units import MIG_RESOURCE_PREFIX


def classes_query() -> Select[GpuClass]:
    return select(GpuClass)


# What a list shows of each class, as plain columns.
_CLASS_PAGE = KeysetPage(select(GpuClass.id, GpuClass.product, GpuClass.display_name,
                                GpuClass.memory_mib, GpuClass.gpus_per_node,
                                GpuClass.declared_by_admin, GpuClass.created_at,
                                GpuClass.share_step), GpuClass.id)


def class_page(db: Session, params: PageParams) -> tuple[Sequence[Any], str | None]:
    return _CLASS_PAGE.rows(db, params, {})


_NAMED = Prepared(select(GpuClass.id, GpuClass.product, GpuClass.display_name)
                  .where(GpuClass.id == bindparam("class_id")))


def named_class(db: Session, gpu_class_id: int) -> NamedClass | None:
    rows = _NAMED.rows(db, {"class_id": gpu_class_id})
    return NamedClass(*rows[0]) if rows else None


def class_by_product(db: Session, product: str) -> GpuClass | None:
    return db.scalar(select(GpuClass).where(GpuClass.product == product))


@dataclass
class SliceSums:
    """MIG slices of one profile (a ``nvidia.com/mig-*`` resource) on a host, region or class:
    on live nodes, of them on nodes not Ready, guaranteed to tenants, and bound to pods."""

    total: int = 0
    not_ready: int = 0
    guaranteed: int = 0
    in_use: float = 0.0

    def add(self, other: SliceSums) -> None:
        self.total += other.total
        self.not_ready += other.not_ready
        self.guaranteed += other.guaranteed
        self.in_use += other.in_use


@dataclass
class HostSums:
    """One host's GPUs of one class, each summed by the database (see ``capacity``)."""

    total: int = 0
    not_ready: int = 0
    dedicated: int = 0
    dedicated_not_ready: int = 0
    placed_shared: int = 0
    in_use: float = 0.0
    borrowed: float = 0.0
    # Shares of one GPU: hundredths held by the shared-pool clusters placed on the host, and
    # GPUs bound to share pods (in GPUs, as fractions).
    placed_share: int = 0
    share_in_use: float = 0.0
    # MIG slices per resource name (``nvidia.com/mig-1g.10gb``).
    slices: dict[str, SliceSums] = field(default_factory=dict)


def _slice(sums: dict[tuple[int, int], HostSums], host_id: int, class_id: int,
           profile: str) -> SliceSums:
    return sums[host_id, class_id].slices.setdefault(MIG_RESOURCE_PREFIX + profile, SliceSums())


def host_sums(db: Session, class_ids: Sequence[int] | None = None,
              region: str | None = None) -> dict[tuple[int, int], HostSums]:
    """(host id, class id) -> the host's sums: nodes, placed clusters and GPUs in use each in
    one aggregate query, whatever the fleet's size; of some classes, or of one region's hosts."""
    sums: dict[tuple[int, int], HostSums] = defaultdict(HostSums)
    for host_id, class_id, total, not_ready, dedicated, dedicated_not_ready in db.execute(
            _node_totals(class_ids, region)):
        row = sums[host_id, class_id]
        row.total, row.not_ready = int(total or 0), int(not_ready or 0)
        row.dedicated, row.dedicated_not_ready = int(dedicated or 0), int(dedicated_not_ready or 0)
    # What the shared-pool clusters placed hold and what is in use, in one statement.
    placed_and_used = union_all(_placed_shared(class_ids, region), _in_use(class_ids, region))
    for source, host_id, class_id, unit, profile, first, second in db.execute(placed_and_used):
        if source == "placed":
            _add_placed(sums, (host_id, class_id), str(unit), str(profile), int(first or 0),
                        int(second or 0))
        else:
            _add_in_use(sums, (host_id, class_id), str(unit), str(profile), float(first or 0),
                        float(second or 0))
    for host_id, class_id, gpus, joining in db.execute(_private_machines(class_ids, region)):
        row = sums[host_id, class_id]
        row.total, row.dedicated = row.total + int(gpus), row.dedicated + int(gpus)
        row.not_ready += int(joining or 0)
        row.dedicated_not_ready += int(joining or 0)
    for host_id, class_id, name, total, not_ready in db.execute(
            _mig_totals(db, class_ids, region)):
        found = sums[host_id, class_id].slices.setdefault(str(name), SliceSums())
        found.total, found.not_ready = int(total or 0), int(not_ready or 0)
    return dict(sums)


def _add_placed(sums: dict[tuple[int, int], HostSums], key: tuple[int, int], unit: str,
                profile: str, gpus: int, amount: int) -> None:
    if unit == "gpu":
        sums[key].placed_shared += gpus
    elif unit == "share":
        sums[key].placed_share += amount
    else:
        _slice(sums, *key, profile).guaranteed += amount


def _add_in_use(sums: dict[tuple[int, int], HostSums], key: tuple[int, int], unit: str,
                profile: str, in_use: float, borrowed: float) -> None:
    """GPUs in use of one unit: whole GPUs and shares (as fractions of a GPU) are GPUs bound
    to pods; MIG slices are counted apart, per profile."""
    row = sums[key]
    if unit == "mig":
        _slice(sums, *key, profile).in_use += in_use
        return
    row.in_use += in_use
    row.borrowed += borrowed
    if unit == "share":
        row.share_in_use += in_use


def shared_guarantees(db: Session, class_ids: Sequence[int] | None = None,
                      region: str | None = None) -> dict[tuple[str, int, str, str], int]:
    """(region, class id, unit, profile) -> what the shared pool there guarantees the tenants
    in that unit's steps (``app.accounting.standing.pool_guarantees``), in one aggregate
    query."""
    return {(str(region_of), class_id, str(unit), str(profile)): int(amount or 0)
            for region_of, class_id, unit, profile, amount
            in db.execute(pool_guarantees(class_ids, region))}


def mig_sums(db: Session, class_ids: Sequence[int],
             region: str | None = None) -> dict[int, dict[str, SliceSums]]:
    """class id -> MIG slices per resource name (``nvidia.com/mig-1g.10gb``) on its live nodes
    in a MIG mode, with those on nodes not Ready (of the region's hosts, if given)."""
    found: dict[int, dict[str, SliceSums]] = defaultdict(dict)
    if class_ids:
        for _, class_id, name, total, not_ready in db.execute(
                _mig_totals(db, list(class_ids), region)):
            summed = found[class_id].setdefault(str(name), SliceSums())
            summed.add(SliceSums(int(total or 0), int(not_ready or 0)))
    return dict(found)


def share_steps(db: Session, class_ids: Sequence[int] | None = None) -> dict[int, int | None]:
    """class id -> its share step in hundredths (None: not shared)."""
    query = select(GpuClass.id, GpuClass.share_step)
    if class_ids is not None:
        query = query.where(GpuClass.id.in_(list(class_ids)))
    return {row.id: row.share_step for row in db.execute(query)}


def _of_classes(column: Any, class_ids: Sequence[int] | None) -> ColumnElement[bool]:
    return true() if class_ids is None else column.in_(list(class_ids))


def _in_region(region: str | None, column: Any = nodes.c.host_cluster_id) -> ColumnElement[bool]:
    if region is None:
        return true()
    in_region: ColumnElement[bool] = column.in_(hosts_in(region))
    return in_region


def _private_machines(class_ids: Sequence[int] | None, region: str | None) -> Select[Any]:
    """GPUs of the machines given to private-nodes clusters per host and class, and of those
    not joined yet: their host's capacity, dedicated (their nodes are no host Node)."""
    m = machines.c
    joining = func.sum(case((m.phase != "joined", m.gpu_count), else_=0))
    return (select(m.host_cluster_id, m.gpu_class_id, func.sum(m.gpu_count), joining)
            .where(m.cluster_id.is_not(None), _of_classes(m.gpu_class_id, class_ids),
                   _in_region(region, m.host_cluster_id))
            .group_by(m.host_cluster_id, m.gpu_class_id))


def _active_assignment() -> ColumnElement[bool]:
    return and_(node_assignments.c.node_id == nodes.c.id, node_assignments.c.ended_at.is_(None))


def _node_totals(class_ids: Sequence[int] | None, region: str | None) -> Select[Any]:
    """Whole GPUs on live nodes per host and class: all, not ready, dedicated, both."""
    is_dedicated = node_assignments.c.id.is_not(None)
    is_not_ready = nodes.c.ready.is_(False)
    not_ready = case((is_not_ready, nodes.c.gpu_count), else_=0)
    dedicated = case((is_dedicated, nodes.c.gpu_count), else_=0)
    both = case((and_(is_dedicated, is_not_ready), nodes.c.gpu_count), else_=0)
    return (select(nodes.c.host_cluster_id, nodes.c.gpu_class_id, func.sum(nodes.c.gpu_count),
                   func.sum(not_ready), func.sum(dedicated), func.sum(both))
            .outerjoin(node_assignments, _active_assignment())
            .where(nodes.c.gpu_class_id.is_not(None), nodes.c.gone_at.is_(None),
                   _of_classes(nodes.c.gpu_class_id, class_ids), _in_region(region))
            .group_by(nodes.c.host_cluster_id, nodes.c.gpu_class_id))


def _placed_shared(class_ids: Sequence[int] | None, region: str | None) -> Select[Any]:
    """What the shared-pool clusters placed on each host hold, per unit and profile (whole
    GPUs, hundredths, slices): their queues' quotas there."""
    clusters = virtual_clusters.c
    return (select(literal("placed"), clusters.host_cluster_id, clusters.gpu_class_id,
                   clusters.unit, clusters.mig_profile,
                   cast(func.sum(clusters.gpus), Double), cast(func.sum(clusters.amount), Double))
            .where(clusters.gpu_class_id.is_not(None), clusters.amount > 0,
                   clusters.placement == "shared-pool",
                   _of_classes(clusters.gpu_class_id, class_ids),
                   _in_region(region, clusters.host_cluster_id))
            .group_by(clusters.host_cluster_id, clusters.gpu_class_id, clusters.unit,
                      clusters.mig_profile))


def _in_use(class_ids: Sequence[int] | None, region: str | None) -> Select[Any]:
    """GPUs bound to pods on each host, and of them the burst, as the worker last read it, per
    unit and profile."""
    used = gpus_in_use.c
    return (select(literal("in use"), used.host_cluster_id, used.gpu_class_id, used.unit,
                   used.mig_profile, func.sum(used.gpus), func.sum(used.burst_gpus))
            .where(_of_classes(used.gpu_class_id, class_ids),
                   _in_region(region, used.host_cluster_id))
            .group_by(used.host_cluster_id, used.gpu_class_id, used.unit, used.mig_profile))


def _mig_totals(db: Session, class_ids: Sequence[int] | None, region: str | None) -> Select[Any]:
    """MIG slices per host, class and resource on live nodes, and of them on nodes not Ready,
    summed from the nodes' JSON in the database.

    Only nodes in a MIG mode carry slices, so the partial index on them keeps this small.
    """
    each = "json_each_text" if db.get_bind().dialect.name == "postgresql" else "json_each"
    slices = getattr(func, each)(nodes.c.mig_resources).table_valued("key", "value")
    count = cast(slices.c.value, Integer)
    not_ready = case((nodes.c.ready.is_(False), count), else_=0)
    return (select(nodes.c.host_cluster_id, nodes.c.gpu_class_id, slices.c.key,
                   func.sum(count), func.sum(not_ready))
            .select_from(nodes).join(slices, true())
            .where(nodes.c.gpu_class_id.is_not(None), nodes.c.gone_at.is_(None),
                   nodes.c.mig_strategy != "none", _of_classes(nodes.c.gpu_class_id, class_ids),
                   _in_region(region))
            .group_by(nodes.c.host_cluster_id, nodes.c.gpu_class_id, slices.c.key)
            .order_by(nodes.c.host_cluster_id, nodes.c.gpu_class_id, slices.c.key))
