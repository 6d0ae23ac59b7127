"""The fleet's capacity per host, region and GPU class, for platform admins: the figures of
``app.gpu_classes.capacity``, the one definition every page, the API and the CLI show.

Filters keep the hosts asked for; a region's row stays its whole region's (quota is approved
per region, not per host), and a class's row sums the regions listed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.authz import ensure_platform_admin
from app.fleet.schemas import (
    ClassCapacityOut,
    FleetCapacityOut,
    HostCapacityOut,
    RegionCapacityOut,
)
from app.gpu_classes import capacity as figures
from app.gpu_classes.models import GpuClass


@dataclass(frozen=True)
class FleetFilters:
    region: str | None = None
    host_cluster: str | None = None
    gpu_class: str | None = None


def capacity(db: Session, principal: Principal, filters: FleetFilters) -> FleetCapacityOut:
    ensure_platform_admin(principal)
    fleet = figures.fleet(db)
    hosts = [row for row in fleet.hosts if _host_kept(row, filters)]
    shown = {(row.host.region, row.gpu_class.id) for row in hosts}
    if filters.host_cluster is None:  # a region's quota counts even where no node is yet
        shown |= {(row.region, row.gpu_class.id) for row in fleet.regions
                  if _kept(row.region, row.gpu_class, filters)}
    regions = [row for row in fleet.regions if (row.region, row.gpu_class.id) in shown]
    return FleetCapacityOut(hosts=[_host_out(row) for row in hosts],
                            regions=[_region_out(row) for row in regions],
                            classes=_classes_out(regions))


def _kept(region: str, gpu_class: GpuClass, filters: FleetFilters) -> bool:
    return ((filters.region is None or region == filters.region)
            and (filters.gpu_class is None or gpu_class.product == filters.gpu_class))


def _host_kept(row: figures.HostRow, filters: FleetFilters) -> bool:
    return (_kept(row.host.region, row.gpu_class, filters)
            and (filters.host_cluster is None or row.host.name == filters.host_cluster))


def _host_out(row: figures.HostRow) -> HostCapacityOut:
    return HostCapacityOut(
        **row.sums.figures(row.gpu_class.share_step), host_cluster=row.host.name,
        region=row.host.region,
        state=row.host.state, reachable=row.host.health_reachable,
        gpu_class=row.gpu_class.product, display_name=row.gpu_class.display_name)


def _region_out(row: figures.RegionRow) -> RegionCapacityOut:
    return RegionCapacityOut(
        **row.sums.figures(row.gpu_class.share_step), region=row.region,
        gpu_class=row.gpu_class.product,
        display_name=row.gpu_class.display_name, hosts=sorted(row.hosts))


def _classes_out(regions: list[figures.RegionRow]) -> list[ClassCapacityOut]:
    sums: dict[str, figures.Sums] = defaultdict(figures.Sums)
    classes: dict[str, GpuClass] = {}
    for row in regions:
        sums[row.gpu_class.product].add(row.sums)
        classes[row.gpu_class.product] = row.gpu_class
    return [ClassCapacityOut(**sums[product].figures(classes[product].share_step),
                             gpu_class=product, display_name=classes[product].display_name)
            for product in sorted(sums)]
