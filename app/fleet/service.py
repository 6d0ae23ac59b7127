"""The fleet's capacity per host, region and GPU class, for platform admins.

Per host, ``guaranteed`` is what the shared-pool clusters placed on it hold (placement draws
quota there). Per region, ``guaranteed`` is the tenants' approved quota of the class there and
``free`` is the nodes' GPUs less the dedicated ones and the quota they do not cover: the
figures quota approvals in the region are checked against (``app.gpu_classes.service``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.authz import ensure_platform_admin
from app.fleet import repository
from app.fleet.schemas import FleetCapacityOut, HostCapacityOut, RegionCapacityOut
from app.gpu_classes import service as gpu_classes


@dataclass(frozen=True)
class FleetFilters:
    region: str | None = None
    host_cluster: str | None = None
    gpu_class: str | None = None


def capacity(db: Session, principal: Principal, filters: FleetFilters) -> FleetCapacityOut:
    ensure_platform_admin(principal)
    hosts = [_host_out(f) for f in repository.host_class_figures(db) if _kept(f, filters)]
    return FleetCapacityOut(hosts=hosts, regions=_regions(db, hosts))


def _kept(figures: repository.HostClassFigures, filters: FleetFilters) -> bool:
    return ((filters.region is None or figures.region == filters.region)
            and (filters.host_cluster is None or figures.host == filters.host_cluster)
            and (filters.gpu_class is None or figures.gpu_class == filters.gpu_class))


def _host_out(f: repository.HostClassFigures) -> HostCapacityOut:
    return HostCapacityOut(
        host_cluster=f.host, region=f.region, state=f.state, reachable=f.reachable,
        gpu_class=f.gpu_class, display_name=f.display_name, total=f.total,
        dedicated=f.dedicated, guaranteed=f.guaranteed,
        free=f.total - f.dedicated - f.guaranteed, not_ready=f.not_ready,
        borrowed=f.borrowed, lent_from_idle_guarantees=lent_from_idle_guarantees(f))


def lent_from_idle_guarantees(f: repository.HostClassFigures) -> float:
    """Burst beyond the ready shared GPUs no shared-pool cluster is guaranteed: KAI can only
    have taken the rest from guarantees their owners left idle, and gives it back when they
    ask. Dedicated nodes are no one's to borrow (their taints keep KAI's pods off)."""
    unguaranteed = f.total - f.not_ready - f.dedicated - f.guaranteed
    return max(0.0, f.borrowed - unguaranteed)


def _regions(db: Session, hosts: list[HostCapacityOut]) -> list[RegionCapacityOut]:
    grouped: dict[tuple[str, str], list[HostCapacityOut]] = defaultdict(list)
    for row in hosts:
        grouped[row.region, row.gpu_class].append(row)
    class_ids = {c.product: c.id for c in gpu_classes.all_classes(db)}
    out = []
    for (region, product), rows in sorted(grouped.items()):
        figures = gpu_classes.capacity(db, class_ids[product], region)
        out.append(RegionCapacityOut(
            region=region, gpu_class=product, display_name=rows[0].display_name,
            hosts=sorted({r.host_cluster for r in rows}), total=figures.total,
            dedicated=figures.assigned, guaranteed=figures.guaranteed, free=figures.free,
            not_ready=figures.not_ready))
    return out
