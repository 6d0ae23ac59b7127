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
- ``guaranteed = dedicated + shared_guaranteed``: what tenants are promised. Per region and class
  it is the approved quota, while no tenant is over it (``Standing.over``).
- ``free = ready - ready dedicated - shared_guaranteed``: the shared pool's Ready GPUs that
  nobody is guaranteed; quota approvals in a region are checked against its free GPUs (past
  them only with an explicit overcommit). Negative when the pool is overcommitted.
- ``in_use``: GPUs bound to pods (fractions and burst included), as the worker last read each
  host; ``borrowed``: of those, the burst, KAI's allocation to leaf queues beyond their quotas.
- ``lent_from_idle_guarantees``: per host, ``max(0, borrowed - max(free, 0))``, the burst the
  free GPUs cannot cover, which KAI lent from guarantees their owners leave idle.

So ``total = ready + not_ready`` and ``total = guaranteed + free + not ready GPUs of the shared
pool`` (when nothing is overcommitted): the charts stack dedicated, guaranteed in the shared pool,
free and not ready in the shared pool, end to end, into the total. A region's figures are the sums
of its hosts' node, in-use and lent figures with the region's quota; a class's figures over the
fleet are the sums of its regions' figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.gpu_classes import repository
from app.gpu_classes.models import GpuClass
from app.gpu_classes.schemas import Capacity
from app.hosts.models import HostCluster


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

    def add(self, other: Sums) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def free(self) -> int:
        ready_shared = self.total - self.not_ready - (self.dedicated - self.dedicated_not_ready)
        return ready_shared - self.shared_guaranteed

    def figures(self) -> dict[str, int | float]:
        return {"total": self.total, "ready": self.total - self.not_ready,
                "not_ready": self.not_ready, "dedicated": self.dedicated,
                "guaranteed": self.dedicated + self.shared_guaranteed,
                "shared_guaranteed": self.shared_guaranteed, "free": self.free,
                "in_use": round(self.in_use, 6), "borrowed": round(self.borrowed, 6),
                "lent_from_idle_guarantees": round(self.lent, 6)}


def of_host(found: repository.HostSums) -> Sums:
    sums = Sums(total=found.total, not_ready=found.not_ready, dedicated=found.dedicated,
                dedicated_not_ready=found.dedicated_not_ready,
                shared_guaranteed=found.placed_shared, in_use=found.in_use,
                borrowed=found.borrowed)
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


def _regions(host_rows: Iterable[HostRow], guarantees: dict[tuple[str, int], int],
             classes: dict[int, GpuClass]) -> list[RegionRow]:
    rows: dict[tuple[str, int], RegionRow] = {}

    def row(region: str, class_id: int) -> RegionRow:
        if (region, class_id) not in rows:
            rows[region, class_id] = RegionRow(region, classes[class_id])
        return rows[region, class_id]

    for host_row in host_rows:
        region = row(host_row.host.region, host_row.gpu_class.id)
        region.hosts.append(host_row.host.name)
        region.sums.add(Sums(**{**host_row.sums.__dict__, "shared_guaranteed": 0}))
    for (region_name, class_id), guaranteed in guarantees.items():
        row(region_name, class_id).sums.shared_guaranteed = guaranteed
    return [rows[key] for key in sorted(rows, key=lambda k: (k[0], classes[k[1]].product))]


def class_capacities(db: Session, class_ids: Sequence[int],
                     region: str | None = None) -> dict[int, Capacity]:
    """The figures of some classes, over the fleet or in one region: those of the hosts (of
    the region) summed with the quota (of the region), in a constant number of queries."""
    sums = {class_id: Sums() for class_id in class_ids}
    if not sums:
        return {}
    for (_, class_id), found in repository.host_sums(db, class_ids, region).items():
        host = of_host(found)
        host.shared_guaranteed = 0  # the region's quota stands for the placed clusters
        sums[class_id].add(host)
    for (_, class_id), guaranteed in repository.shared_guarantees(db, class_ids,
                                                                  region).items():
        sums[class_id].shared_guaranteed += guaranteed
    slices = repository.mig_sums(db, class_ids, region)
    return {class_id: as_capacity(figures, slices.get(class_id, {}))
            for class_id, figures in sums.items()}


def as_capacity(sums: Sums, mig_resources: dict[str, int] | None = None) -> Capacity:
    return Capacity.model_validate({**sums.figures(), "assigned": sums.dedicated,
                                    "mig_resources": dict(sorted((mig_resources or {}).items()))})
