"""The bare-metal machines private-nodes clusters are made of, as the accounting sees them:
which machines of a class are free on a host, what each cluster has been given, and what the
private-nodes clusters of a host still wait for. A machine is free when it is in the pool,
``available`` (inspected, no image), not being deleted and no cluster's (``cluster_id``
cleared only once it came back wiped)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, func, select
from sqlalchemy.orm import Session

from app.accounting.read_models import machines, virtual_clusters
from app.accounting.standing import PRIVATE
from app.kit.sums import exact_parts


def is_free() -> ColumnElement[bool]:
    m = machines.c
    return and_(m.cluster_id.is_(None), m.desired == "pool", m.phase == "available",
                m.deleting_at.is_(None))


@dataclass(frozen=True)
class Pool:
    """One host's machines of one class for private-nodes clusters."""

    # GPUs of each free machine, largest first.
    free: tuple[int, ...] = ()
    # GPUs the host's private-nodes clusters of the class ask and have not been given yet.
    promised: int = 0

    @property
    def free_gpus(self) -> int:
        return sum(self.free)

    @property
    def room(self) -> int:
        return max(self.free_gpus - self.promised, 0)

    def fits(self, gpus: int) -> bool:
        """Whole free machines make exactly ``gpus``, after what others were promised."""
        return gpus <= self.room and exact_parts(self.free, gpus) is not None


def pools(db: Session, gpu_class_id: int) -> dict[int, Pool]:
    """host id -> its pool of the class: two grouped statements."""
    m, clusters = machines.c, virtual_clusters.c
    free: dict[int, list[int]] = defaultdict(list)
    for host_id, gpus in db.execute(
            select(m.host_cluster_id, m.gpu_count)
            .where(is_free(), m.gpu_class_id == gpu_class_id)
            .order_by(m.host_cluster_id, m.gpu_count.desc(), m.id)):
        free[host_id].append(int(gpus))
    given = (select(m.cluster_id, func.sum(m.gpu_count).label("gpus"))
             .where(m.cluster_id.is_not(None), m.desired == "private")
             .group_by(m.cluster_id).subquery("given"))
    promised: dict[int, int] = defaultdict(int)
    for host_id, asked, got in db.execute(
            select(clusters.host_cluster_id, clusters.gpus, func.coalesce(given.c.gpus, 0))
            .outerjoin(given, given.c.cluster_id == clusters.id)
            .where(clusters.placement == PRIVATE, clusters.gpu_class_id == gpu_class_id)):
        promised[host_id] += max(int(asked) - int(got), 0)
    return {host: Pool(tuple(free.get(host, ())), promised.get(host, 0))
            for host in set(free) | set(promised)}


def given_gpus(db: Session, cluster_id: int) -> list[int]:
    """GPUs of each machine the cluster holds (being given back ones excluded)."""
    m = machines.c
    return [int(g) for g in db.scalars(select(m.gpu_count).where(
        m.cluster_id == cluster_id, m.desired == "private").order_by(m.id))]


@dataclass(frozen=True)
class ServingMachine:
    """A machine as its cluster's tenant sees it: no BMC, no host object."""

    name: str
    gpus: int
    phase: str
    node_name: str | None
    # Given back: leaving the cluster, to be wiped.
    leaving: bool


def serving(db: Session, cluster_ids: list[int]) -> dict[int, list[ServingMachine]]:
    """cluster id -> the machines the private-nodes cluster holds, by name: one statement."""
    m = machines.c
    found: dict[int, list[ServingMachine]] = defaultdict(list)
    for cluster_id, name, gpus, phase, node, desired in db.execute(
            select(m.cluster_id, m.name, m.gpu_count, m.phase, m.node_name, m.desired)
            .where(m.cluster_id.in_(cluster_ids)).order_by(m.cluster_id, m.name)):
        found[int(cluster_id)].append(
            ServingMachine(str(name), int(gpus), str(phase), node, desired != "private"))
    return dict(found)
