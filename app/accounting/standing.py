"""The one accounting of a tenant's guaranteed GPUs, per tenant, GPU class and region.

- ``approved``: the tenant's approved quota of the class in the region. It is the tenant's
  whole guarantee there.
- ``dedicated``: GPUs on live nodes of the class in the region's hosts dedicated to the tenant.
  They are part of the approved quota, not added to it.
- ``shared_held``: GPUs of the tenant's shared-pool clusters of the class there (asleep ones and
  those being deleted included: they come back, or still hold them).
- ``dedicated_held``: GPUs of its dedicated-nodes clusters there. They draw on the dedicated
  GPUs (host by host), never on the rest of the quota.
- ``private_held``: GPUs of its private-nodes clusters there (whole machines joined to the
  cluster itself, issue 57). Part of the approved quota like dedicated nodes: capacity figures
  count them as dedicated.

The rule every door keeps: ``dedicated + shared_held + private_held <= approved``, and on each
host the dedicated-nodes clusters hold no more than the tenant's dedicated GPUs there. So
shared-pool clusters have ``approved - dedicated - private_held`` to share (``for_shared``),
private-nodes clusters what shared-pool clusters leave of it, and the shared pool's
guarantee to the tenant (its KAI tenant queue's quota, its clusters' ResourceQuota ceilings, the
region's guaranteed figure) is that rest, or what its shared-pool clusters hold if more
(``shared_guarantee``: a tenant over quota, after an expiry or from before this rule, keeps
what it runs). Burst is on top of the guarantee, as before.

Only the quota can shrink below what is held (an expiry): nothing running is taken away, the
difference is ``over`` and every door that would add to it refuses.

Each unit of a grant (``app.kit.gpu_units``: whole GPUs, slices of one MIG profile, hundredths
of one GPU) is a standing of its own, in that unit's steps: a tenant's quota of slices of a
class is not a quota of its whole GPUs. Only whole GPUs are ever dedicated or in private-nodes
clusters, so a standing of slices or shares has neither. Every sum of whole GPUs reads the
``gpus`` columns, as before the units (0 on the rows of the other units); a sum of another unit
reads ``amount`` of that unit's rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, case, false, func, select, true
from sqlalchemy.orm import Session

from app.accounting.read_models import node_assignments, nodes, tenant_quotas, virtual_clusters
from app.hosts.models import HostCluster
from app.hosts.repository import hosts_in
from app.kit.gpu_units import WHOLE_GPUS, GrantUnit, steps, words

SHARED = "shared-pool"
DEDICATED = "dedicated-nodes"
PRIVATE = "private-nodes"

Key = tuple[int, int, str, str, str]
"""(tenant id, GPU class id, region, unit, MIG profile): a standing of one unit of a class."""

WHOLE = "gpu"  # the unit of whole GPUs, as the ``unit`` columns store it


def unit_of(key: Key) -> GrantUnit:
    """The unit a ``Key`` counts in."""
    return GrantUnit(key[3], key[4])  # type: ignore[arg-type]  # the columns' check: a UnitKind


@dataclass(frozen=True)
class Standing:
    """A tenant's GPUs of one class in one region, as the rule counts them."""

    approved: int = 0
    dedicated: int = 0
    shared_held: int = 0
    dedicated_held: int = 0
    private_held: int = 0

    @property
    def for_shared(self) -> int:
        """The quota shared-pool clusters may hold: what dedicated nodes and private-nodes
        clusters leave of it."""
        return max(self.approved - self.dedicated - self.private_held, 0)

    @property
    def shared_left(self) -> int:
        return max(self.for_shared - self.shared_held, 0)

    @property
    def dedicated_left(self) -> int:
        """Dedicated GPUs of the region no dedicated-nodes cluster holds (hosts summed)."""
        return max(self.dedicated - self.dedicated_held, 0)

    @property
    def over(self) -> int:
        """How far dedicated, shared-pool and private-node GPUs together pass the approved
        quota."""
        return max(self.dedicated + self.shared_held + self.private_held - self.approved, 0)

    @property
    def shared_guarantee(self) -> int:
        """What the shared pool guarantees the tenant: its KAI tenant queue's quota."""
        return max(self.approved - self.dedicated - self.private_held, self.shared_held)

    @property
    def guaranteed(self) -> int:
        return self.dedicated + self.private_held + self.shared_guarantee

    def left_for(self, placement: str) -> int:
        """What a new cluster of ``placement`` may take here: a private-nodes cluster takes
        from the same rest of the quota as a shared-pool one."""
        return self.dedicated_left if placement == DEDICATED else self.shared_left

    def with_shared(self, gpus: int) -> Standing:
        return Standing(self.approved, self.dedicated, self.shared_held + gpus,
                        self.dedicated_held, self.private_held)


def shared_refusal(standing: Standing, gpus: int, class_name: str, region: str,
                   placement: str = SHARED, unit: GrantUnit = WHOLE_GPUS) -> str | None:
    """Why ``gpus`` more (in ``unit``'s steps) in shared-pool (or private-nodes) clusters break
    the rule, in the tenant's figures; None when they fit."""
    if gpus <= standing.shared_left:
        return None
    if not unit.is_whole:
        return _parts_refusal(standing, gpus, class_name, region, placement, unit)
    where = f" in region {region}" if region else ""
    figures = []
    if standing.dedicated:
        figures.append(f"{standing.dedicated} of your {standing.approved} {class_name} "
                       f"GPUs{where} are on your dedicated nodes")
    for held, what in ((standing.shared_held, "shared-pool"),
                       (standing.private_held, "private-nodes")):
        if held:
            figures.append(f"your {what} clusters hold {held}" if figures else
                           f"your {what} clusters hold {held} of your "
                           f"{standing.approved} {class_name} GPUs{where}")
    if not figures:
        figures.append(f"you have {standing.approved} {class_name} GPUs approved{where}")
    return (f"{'; '.join(figures)}; {standing.shared_left} are left for {placement} clusters, "
            f"{gpus} asked: request more quota first")


def _parts_refusal(standing: Standing, asked: int, class_name: str, region: str,
                   placement: str, unit: GrantUnit) -> str:
    """``shared_refusal`` of MIG slices or a share, in their steps: "your shared-pool clusters
    hold 2 x 1g.10gb of your 3 x 1g.10gb of A100 SXM4 80GB; 1 x 1g.10gb left ..., 2 x 1g.10gb
    asked"."""
    where = f" in region {region}" if region else ""
    approved = words(unit, standing.approved, class_name)
    figure = (f"your {SHARED} clusters hold {steps(unit, standing.shared_held)} of your "
              f"{approved}{where}" if standing.shared_held
              else f"you have {approved} approved{where}")
    return (f"{figure}; {steps(unit, standing.shared_left)} left for {placement} clusters, "
            f"{steps(unit, asked)} asked: request more quota first")


def dedication_refusal(standing: Standing, node: str, gpus: int, tenant: str,
                       class_name: str, region: str) -> str | None:
    """Why dedicating a node of ``gpus`` to the tenant breaks the rule; None when it fits."""
    after = Standing(standing.approved, standing.dedicated + gpus, standing.shared_held, 0,
                     standing.private_held)
    if after.over <= standing.over or after.over == 0:
        return None
    where = f" in region {region}" if region else ""
    shrink = "shrink its shared-pool clusters or " if after.shared_held else ""
    private = (f", {after.private_held} in private-nodes clusters" if after.private_held
               else "")
    return (f"dedicating {node} ({gpus} GPUs) would give {tenant} {after.dedicated} "
            f"{class_name} GPUs on dedicated nodes and {after.shared_held} in shared-pool "
            f"clusters{private}{where}, "
            f"{after.dedicated + after.shared_held + after.private_held} in all: {after.over} more "
            f"than its approved quota of {after.approved}; {shrink}approve more quota first")


def end_refusal(node: str, gpus: int, on_host: int, held_on_host: int, tenant: str,
                class_name: str) -> str | None:
    """Why ending a node's dedication of ``gpus`` would take GPUs from under the tenant's
    dedicated-nodes clusters on its host; None when they fit on what stays."""
    if held_on_host <= on_host - gpus:
        return None
    return (f"{tenant}'s dedicated-nodes clusters hold {held_on_host} {class_name} GPUs on "
            f"its dedicated nodes of this host; ending {node} ({gpus} GPUs) leaves "
            f"{on_host - gpus}: they would lose {held_on_host - on_host + gpus}. Ask the "
            "tenant to shrink or delete them first")


# ----- the sums, each written here once; every argument a value or a correlated column


def _whole(unit: Any) -> bool:
    """Whether ``unit`` (a value or a correlated column) is whole GPUs, known in Python."""
    return isinstance(unit, str) and unit == WHOLE


def held_gpus(tenant_id: Any, gpu_class_id: Any, region: Any, *, placement: str | None = None,
              excluding: int | None = None, host_cluster_id: int | None = None,
              unit: Any = WHOLE, profile: Any = "") -> Select[Any]:
    """The GPUs of a class the tenant's clusters hold in a region (of one placement, on one
    host of it, if given), those being deleted and asleep included; of another ``unit`` (and
    ``profile``; values or correlated columns), what they hold of it in its steps."""
    clusters = virtual_clusters.c
    summed = clusters.gpus if _whole(unit) else clusters.amount
    query = select(func.coalesce(func.sum(summed), 0)).where(
        clusters.tenant_id == tenant_id, clusters.gpu_class_id == gpu_class_id,
        clusters.host_cluster_id.in_(hosts_in(region)))
    if not _whole(unit):
        query = query.where(clusters.unit == unit, clusters.mig_profile == profile)
    if placement is not None:
        query = query.where(clusters.placement == placement)
    if excluding is not None:
        query = query.where(clusters.id != excluding)
    if host_cluster_id is not None:
        query = query.where(clusters.host_cluster_id == host_cluster_id)
    return query


def _live_assignment() -> ColumnElement[bool]:
    return and_(node_assignments.c.node_id == nodes.c.id, node_assignments.c.ended_at.is_(None))


def dedicated_gpus(tenant_id: Any, gpu_class_id: Any, region: Any, *,
                   host_cluster_id: int | None = None, unit: Any = WHOLE) -> Select[Any]:
    """The GPUs on live nodes of the class in the region's hosts (on one of them, if given)
    dedicated to the tenant; none of another ``unit`` (a value or a correlated column): only
    whole GPUs are dedicated."""
    query = (select(func.coalesce(func.sum(nodes.c.gpu_count), 0))
             .join(node_assignments, _live_assignment())
             .where(node_assignments.c.tenant_id == tenant_id,
                    nodes.c.gpu_class_id == gpu_class_id, nodes.c.gone_at.is_(None),
                    nodes.c.host_cluster_id.in_(hosts_in(region))))
    if not _whole(unit):
        query = query.where(false() if isinstance(unit, str) else unit == WHOLE)
    if host_cluster_id is not None:
        query = query.where(nodes.c.host_cluster_id == host_cluster_id)
    return query


def shared_guarantee(approved: Any, dedicated: Any, shared_held: Any,
                     private_held: Any = 0) -> Any:
    """``Standing.shared_guarantee`` as SQL, of four columns or values."""
    rest = approved - dedicated - private_held
    return case((rest > shared_held, rest), else_=shared_held)


def standing_columns(tenant_id: Any, gpu_class_id: Any, region: Any, approved: Any,
                     unit: Any = WHOLE, profile: Any = "") -> list[Any]:
    """Columns ``dedicated``, ``shared_held``, ``dedicated_held``, ``private_held`` and
    ``shared_guarantee`` of a row naming a tenant, a class and a region with its ``approved``
    quota (of ``unit`` and ``profile``, values or the row's columns: in that unit's steps)."""
    dedicated = dedicated_gpus(tenant_id, gpu_class_id, region, unit=unit).scalar_subquery()
    held = {placement: held_gpus(tenant_id, gpu_class_id, region, placement=placement,
                                 unit=unit, profile=profile).scalar_subquery()
            for placement in (SHARED, DEDICATED, PRIVATE)}
    return [dedicated.label("dedicated"), held[SHARED].label("shared_held"),
            held[DEDICATED].label("dedicated_held"), held[PRIVATE].label("private_held"),
            shared_guarantee(approved, dedicated, held[SHARED],
                             held[PRIVATE]).label("shared_guarantee")]


def standings(db: Session, tenant_id: int, gpu_class_id: int, *,
              excluding: int | None = None, unit: GrantUnit = WHOLE_GPUS) -> dict[str, Standing]:
    """region -> the tenant's standing of the class there (in ``unit``), for every region it
    has a quota row of the class and unit in (``excluding`` one cluster, being resized); one
    statement. A caller that writes on it holds the quota rows' lock first."""
    quotas = tenant_quotas.c
    held = {placement: held_gpus(quotas.tenant_id, quotas.gpu_class_id, quotas.region,
                                 placement=placement, excluding=excluding, unit=unit.kind,
                                 profile=unit.profile).scalar_subquery()
            for placement in (SHARED, DEDICATED, PRIVATE)}
    rows = db.execute(
        select(quotas.region, quotas.gpus if unit.is_whole else quotas.amount,
               dedicated_gpus(quotas.tenant_id, quotas.gpu_class_id, quotas.region,
                              unit=unit.kind).scalar_subquery(), held[SHARED], held[DEDICATED],
               held[PRIVATE])
        .where(quotas.tenant_id == tenant_id, quotas.gpu_class_id == gpu_class_id,
               quotas.unit == unit.kind, quotas.mig_profile == unit.profile)
        .order_by(quotas.id))
    return {row[0]: Standing(int(row[1]), int(row[2] or 0), int(row[3] or 0), int(row[4] or 0),
                             int(row[5] or 0))
            for row in rows}


def standing(db: Session, tenant_id: int, gpu_class_id: int, region: str, *,
             excluding: int | None = None, unit: GrantUnit = WHOLE_GPUS) -> Standing:
    """The tenant's standing of the class (in ``unit``) in one region (all zero without a
    quota row there, but what its nodes and clusters hold)."""
    found = standings(db, tenant_id, gpu_class_id, excluding=excluding, unit=unit).get(region)
    if found is not None:
        return found

    def held(placement: str) -> int:
        return int(db.scalar(held_gpus(tenant_id, gpu_class_id, region, placement=placement,
                                       excluding=excluding, unit=unit.kind,
                                       profile=unit.profile)) or 0)

    dedicated = db.scalar(dedicated_gpus(tenant_id, gpu_class_id, region, unit=unit.kind))
    return Standing(0, int(dedicated or 0), held(SHARED), held(DEDICATED), held(PRIVATE))


# ----- every tenant at once: the fleet's figures and the operator's check


def every_standing(db: Session, tenant_id: int | None = None) -> dict[Key, Standing]:
    """(tenant, class, region, unit, profile) -> standing, of every tenant (or one) with a
    quota row, a dedicated node or a cluster holding GPUs (slices, a share) anywhere: three
    grouped statements."""
    figures: dict[Key, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    quotas = tenant_quotas.c
    of_tenant = true() if tenant_id is None else quotas.tenant_id == tenant_id
    for tenant, class_id, region, unit, profile, amount in db.execute(
            select(quotas.tenant_id, quotas.gpu_class_id, quotas.region, quotas.unit,
                   quotas.mig_profile, quotas.amount).where(of_tenant)):
        figures[tenant, class_id, region, unit, profile][0] = int(amount)
    for tenant, class_id, region, gpus in db.execute(_dedicated_per_key(tenant_id)):
        figures[tenant, class_id, str(region), WHOLE, ""][1] = int(gpus or 0)
    for tenant, class_id, region, unit, profile, placement, amount in db.execute(
            _held_per_key(tenant_id)):
        figures[tenant, class_id, str(region), unit, profile][_COLUMN[placement]] += int(
            amount or 0)
    return {key: Standing(*values) for key, values in sorted(figures.items())}


_COLUMN = {SHARED: 2, DEDICATED: 3, PRIVATE: 4}


def _dedicated_per_key(tenant_id: int | None) -> Select[Any]:
    assigned = node_assignments.c
    return (select(assigned.tenant_id, nodes.c.gpu_class_id, HostCluster.region,
                   func.sum(nodes.c.gpu_count).label("gpus"))
            .join(node_assignments, _live_assignment())
            .join(HostCluster, HostCluster.id == nodes.c.host_cluster_id)
            .where(nodes.c.gone_at.is_(None), nodes.c.gpu_class_id.is_not(None),
                   true() if tenant_id is None else assigned.tenant_id == tenant_id)
            .group_by(assigned.tenant_id, nodes.c.gpu_class_id, HostCluster.region))


def _held_per_key(tenant_id: int | None) -> Select[Any]:
    """What clusters hold per tenant, class, region, unit, profile and placement, in the unit's
    steps (``amount``, which is ``gpus`` on a cluster of whole GPUs)."""
    clusters = virtual_clusters.c
    return (select(clusters.tenant_id, clusters.gpu_class_id, HostCluster.region,
                   clusters.unit, clusters.mig_profile, clusters.placement,
                   func.sum(clusters.amount).label("amount"))
            .join(HostCluster, HostCluster.id == clusters.host_cluster_id)
            .where(clusters.gpu_class_id.is_not(None), clusters.amount > 0,
                   true() if tenant_id is None else clusters.tenant_id == tenant_id)
            .group_by(clusters.tenant_id, clusters.gpu_class_id, HostCluster.region,
                      clusters.unit, clusters.mig_profile, clusters.placement))


def pool_guarantees(class_ids: Sequence[int] | None = None,
                    region: str | None = None) -> Select[Any]:
    """(region, class id, unit, profile, amount): what the shared pool of a region guarantees
    all tenants of a class together, per unit in its steps, each tenant's ``shared_guarantee``
    summed, in one statement (the nodes and clusters each summed once, grouped, whatever the
    number of tenants)."""
    quotas = tenant_quotas.c
    dedicated = _dedicated_per_key(None).subquery("dedicated")
    shared = _held_per_key(None).subquery("shared")
    private = _held_per_key(None).subquery("private")
    query = (select(quotas.region, quotas.gpu_class_id, quotas.unit, quotas.mig_profile,
                    func.sum(shared_guarantee(
                        quotas.amount, func.coalesce(dedicated.c.gpus, 0),
                        func.coalesce(shared.c.amount, 0), func.coalesce(private.c.amount, 0))))
             .outerjoin(dedicated, and_(_same_key(dedicated), quotas.unit == WHOLE))
             .outerjoin(shared, and_(_same_key(shared), _same_unit(shared),
                                     shared.c.placement == SHARED))
             .outerjoin(private, and_(_same_key(private), _same_unit(private),
                                      private.c.placement == PRIVATE)))
    if class_ids is not None:
        query = query.where(quotas.gpu_class_id.in_(list(class_ids)))
    if region is not None:
        query = query.where(quotas.region == region)
    return query.group_by(quotas.region, quotas.gpu_class_id, quotas.unit, quotas.mig_profile)


def _same_key(grouped: Any) -> ColumnElement[bool]:
    quotas = tenant_quotas.c
    return and_(grouped.c.tenant_id == quotas.tenant_id,
                grouped.c.gpu_class_id == quotas.gpu_class_id, grouped.c.region == quotas.region)


def _same_unit(grouped: Any) -> ColumnElement[bool]:
    quotas = tenant_quotas.c
    return and_(grouped.c.unit == quotas.unit, grouped.c.mig_profile == quotas.mig_profile)
