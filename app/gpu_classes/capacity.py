"""The fleet's GPU capacity: one definition of each figure, for every page, the API and the CLI.

Every surface that shows capacity (the Fleet page, Fleet by host and region, GPU classes, the
quota approval queue, ``/api/v1/fleet/capacity``, ``/api/v1/gpu-classes``, ``portalctl fleet``)
and every approval reads it from here, per host, per region or per class, each a GPU class's
figures:

- ``total``: whole GPUs (allocatable ``nvidia.com/gpu``) on live nodes, that is nodes the
  inventory has not seen vanish, Ready or not, cordoned or not, dedicated or not. MIG slices are
  listed apart, never counted as whole GPUs.
- ``not_ready``: of total, on nodes that are not Ready; ``ready = total - not_ready``.
- ``dedicated``: of total, on nodes dedicated to a tenant, Ready or not.
- ``shared_guaranteed``: guaranteed in the shared pool. Per region (and so per class), what the
  pool guarantees the tenants there: each tenant's approved quota less its dedicated GPUs, or
  what its shared-pool clusters hold if more (``app.accounting.standing``, the one accounting);
  per host, the GPUs of the shared-pool clusters placed on it, which are its KAI leaf queues'
  quotas (quota not yet given to a cluster belongs to its region, not to a host). A sleeping
  cluster still counts (its GPUs come back when it wakes; the sleep report tells what it gave
  the pool).
- ``shared_fraction_gpus``: the whole GPUs that shares of one GPU (KAI GPU sharing) take out of
  the shared pool: the hundredths guaranteed (per region, each tenant's share quota; per host,
  the share clusters placed on it), rounded up to whole GPUs, so that whole-GPU approvals stay
  off GPUs the fractions need (where fractions land on GPUs is KAI's business, not counted).
- ``guaranteed = dedicated + shared_guaranteed + shared_fraction_gpus``: what tenants are
  promised. Per region and class it is the approved quota, while no tenant is over it
  (``Standing.over``).
- ``free = ready - ready dedicated - shared_guaranteed - shared_fraction_gpus``: the shared
  pool's Ready GPUs that nobody is guaranteed; quota approvals in a region are checked against
  its free GPUs (past them only with an explicit overcommit). Negative when the pool is
  overcommitted.
- ``in_use``: GPUs bound to pods (fractions and burst included), as the worker last read each
  host; ``borrowed``: of those, the burst, KAI's allocation to leaf queues beyond their quotas.
- ``lent_from_idle_guarantees``: per host, ``max(0, borrowed - max(free, 0))``, the burst the
  free GPUs cannot cover, which KAI lent from guarantees their owners leave idle.

MIG slices are figures of their own, per profile (``mig_profiles``): ``total`` slices on live
nodes, ``ready``, ``guaranteed`` (approved, or per host placed), ``free = ready - guaranteed``
(negative after a MIG reconfiguration took slices away) and ``in_use``. Shares are summed
apart too (``shared``: the class's step, guaranteed and in use, in GPUs).

So ``total = ready + not_ready`` and ``total = guaranteed + free + not ready GPUs of the shared
pool`` (when nothing is overcommitted): the charts stack dedicated, guaranteed in the shared pool,
free and not ready in the shared pool, end to end, into the total. A region's figures are the sums
of its hosts' node, in-use and lent figures with the region's quota; a class's figures over the
fleet are the sums of its regions' figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from math import ceil

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.gpu_classes import repository
from app.gpu_classes.models import GpuClass
from app.gpu_classes.repository import SliceSums
from app.gpu_classes.schemas import Capacity
from app.hosts.models import HostCluster
from app.kit.gpu_units import (
    MIG_RESOURCE_PREFIX,
    SHARE_STEPS,
    GrantUnit,
    gpu_instances,
    profile_of_resource,
    share_text,
)

_ADDED = ("total", "not_ready", "dedicated", "dedicated_not_ready", "shared_guaranteed",
          "share_guaranteed", "shared_fraction_gpus", "in_use", "share_in_use", "borrowed",
          "lent")


@dataclass
class Sums:
    """Additive sums of one host, region or class, from which every figure is derived."""

    total: int = 0
    not_ready: int = 0
    dedicated: int = 0
    dedicated_not_ready: int = 0
    shared_guaranteed: int = 0
    in_use: float = 0.0
    borrowed: float = 0.0
    lent: float = 0.0
    # Shares of one GPU guaranteed, in hundredths, and the whole GPUs they take out of the pool
    # (rounded up where they are summed: per host, per region), and shares in use in GPUs.
    share_guaranteed: int = 0
    shared_fraction_gpus: int = 0
    share_in_use: float = 0.0
    slices: dict[str, SliceSums] = field(default_factory=dict)  # per nvidia.com/mig-* resource

    def add(self, other: Sums) -> None:
        for name in _ADDED:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name, found in other.slices.items():
            self.slices.setdefault(name, SliceSums()).add(found)

    def guarantee_shares(self, hundredths: int) -> None:
        """Adds shares guaranteed at one place (a host, a region), rounded up there."""
        self.share_guaranteed += hundredths
        self.shared_fraction_gpus += ceil(hundredths / SHARE_STEPS)

    @property
    def free(self) -> int:
        ready_shared = self.total - self.not_ready - (self.dedicated - self.dedicated_not_ready)
        return ready_shared - self.shared_guaranteed - self.shared_fraction_gpus

    def figures(self, share_step: int | None = None) -> dict[str, object]:
        """The figures as the API names them; ``shared`` given when the class is shared
        (``share_step``) or shares are approved or in use."""
        shared = None
        if share_step is not None or self.share_guaranteed or self.share_in_use:
            slack = self.shared_fraction_gpus * SHARE_STEPS - self.share_guaranteed
            shared = {"step": share_step, "guaranteed": share_text(self.share_guaranteed),
                      "in_use": share_text(round(self.share_in_use * SHARE_STEPS)),
                      "free_hundredths": self.free * SHARE_STEPS + slack}
        return {"total": self.total, "ready": self.total - self.not_ready,
                "not_ready": self.not_ready, "dedicated": self.dedicated,
                "guaranteed": self.dedicated + self.shared_guaranteed
                + self.shared_fraction_gpus,
                "shared_guaranteed": self.shared_guaranteed,
                "shared_fraction_gpus": self.shared_fraction_gpus, "free": self.free,
                "in_use": round(self.in_use, 6), "borrowed": round(self.borrowed, 6),
                "lent_from_idle_guarantees": round(self.lent, 6),
                "mig_profiles": _profiles(self.slices), "shared": shared}

    def without_guarantees(self) -> Sums:
        """The node, in-use and lent sums alone: a host's, under its region's quota."""
        sums = Sums(**{**self.__dict__, "shared_guaranteed": 0, "share_guaranteed": 0,
                       "shared_fraction_gpus": 0, "slices": {}})
        for name, found in self.slices.items():
            sums.slices[name] = SliceSums(found.total, found.not_ready, 0, found.in_use)
        return sums


def _profiles(slices: dict[str, SliceSums]) -> list[dict[str, object]]:
    """One row per profile KAI can count, by profile; a profile it cannot (``+me``) is not
    offered, and stays only in ``mig_resources``."""
    rows = []
    for name, found in sorted(slices.items()):
        profile = profile_of_resource(name)
        if profile is None:
            continue
        ready = found.total - found.not_ready
        rows.append({"profile": profile, "total": found.total, "ready": ready,
                     "guaranteed": found.guaranteed, "free": ready - found.guaranteed,
                     "in_use": round(found.in_use, 6), "kai_gpus_each": gpu_instances(profile)})
    return rows


def of_host(found: repository.HostSums) -> Sums:
    sums = Sums(total=found.total, not_ready=found.not_ready, dedicated=found.dedicated,
                dedicated_not_ready=found.dedicated_not_ready,
                shared_guaranteed=found.placed_shared, in_use=found.in_use,
                borrowed=found.borrowed, share_in_use=found.share_in_use,
                slices={name: SliceSums(s.total, s.not_ready, s.guaranteed, s.in_use)
                        for name, s in found.slices.items()})
    sums.guarantee_shares(found.placed_share)
    sums.lent = max(0.0, found.borrowed - max(sums.free, 0))
    return sums


@dataclass
class HostRow:
    host: HostCluster
    gpu_class: GpuClass
    sums: Sums


@dataclass
class RegionRow:
    region: str
    gpu_class: GpuClass
    hosts: list[str] = field(default_factory=list)
    sums: Sums = field(default_factory=Sums)


@dataclass
class Fleet:
    """The figures per host and class, and per region and class (a class's are the sums of
    its regions')."""

    hosts: list[HostRow]
    regions: list[RegionRow]


def fleet(db: Session) -> Fleet:
    """Every host's and region's figures, in a constant number of queries."""
    hosts = {row.id: row for row in db.scalars(select(HostCluster))}
    classes = {row.id: row for row in db.scalars(select(GpuClass))}
    host_rows = [HostRow(hosts[host_id], classes[class_id], of_host(found))
                 for (host_id, class_id), found in repository.host_sums(db).items()]
    host_rows.sort(key=lambda r: (r.host.region, r.host.name, r.gpu_class.product))
    return Fleet(host_rows, _regions(host_rows, repository.shared_guarantees(db), classes))


def _regions(host_rows: Iterable[HostRow],
             guarantees: dict[tuple[str, int, str, str], int],
             classes: dict[int, GpuClass]) -> list[RegionRow]:
    rows: dict[tuple[str, int], RegionRow] = {}

    def row(region: str, class_id: int) -> RegionRow:
        if (region, class_id) not in rows:
            rows[region, class_id] = RegionRow(region, classes[class_id])
        return rows[region, class_id]

    for host_row in host_rows:
        region = row(host_row.host.region, host_row.gpu_class.id)
        region.hosts.append(host_row.host.name)
        region.sums.add(host_row.sums.without_guarantees())
    for (region_name, class_id, unit, profile), guaranteed in guarantees.items():
        _guarantee(row(region_name, class_id).sums, unit, profile, guaranteed)
    return [rows[key] for key in sorted(rows, key=lambda k: (k[0], classes[k[1]].product))]


def _guarantee(sums: Sums, unit: str, profile: str, amount: int) -> None:
    """Adds what the shared pool of one region guarantees in one unit."""
    if unit == "share":
        sums.guarantee_shares(amount)
    elif unit == "mig":
        name = MIG_RESOURCE_PREFIX + profile
        sums.slices.setdefault(name, SliceSums()).guaranteed += amount
    else:
        sums.shared_guaranteed += amount


def class_capacities(db: Session, class_ids: Sequence[int],
                     region: str | None = None) -> dict[int, Capacity]:
    """The figures of some classes, over the fleet or in one region: those of the hosts (of
    the region) summed with the quota (of each region), in a constant number of queries."""
    sums = {class_id: Sums() for class_id in class_ids}
    if not sums:
        return {}
    for (_, class_id), found in repository.host_sums(db, class_ids, region).items():
        # the region's quota stands for the placed clusters
        sums[class_id].add(of_host(found).without_guarantees())
    for (_, class_id, unit, profile), guaranteed in repository.shared_guarantees(
            db, class_ids, region).items():
        _guarantee(sums[class_id], unit, profile, guaranteed)
    steps = repository.share_steps(db, class_ids)
    return {class_id: as_capacity(figures, steps.get(class_id))
            for class_id, figures in sums.items()}


def free_steps(capacity: Capacity, unit: GrantUnit) -> int:
    """What approvals of ``unit`` are checked against, in its steps: free whole GPUs, free
    slices of the profile (0 where the class has none), or free hundredths of a GPU."""
    if unit.kind == "mig":
        return next((p.free for p in capacity.mig_profiles if p.profile == unit.profile), 0)
    if unit.kind == "share":
        return (capacity.shared.free_hundredths if capacity.shared is not None
                else capacity.free * SHARE_STEPS)
    return capacity.free


def as_capacity(sums: Sums, share_step: int | None = None) -> Capacity:
    resources = {name: found.total for name, found in sorted(sums.slices.items())
                 if found.total > 0}
    return Capacity.model_validate({**sums.figures(share_step), "assigned": sums.dedicated,
                                    "mig_resources": resources})
