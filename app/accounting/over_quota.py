"""Tenants over quota under the rule (``app.accounting.standing``), with where their GPUs are:
what the operator's ``portal quota check`` lists on an existing install. Reads only."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.accounting.read_models import node_assignments, nodes, virtual_clusters
from app.accounting.standing import SHARED, Standing, every_standing, unit_of
from app.hosts.models import HostCluster
from app.kit.gpu_units import WHOLE_GPUS, GrantUnit
from app.tenants.models import Tenant


@dataclass(frozen=True)
class Holding:
    """A dedicated node or a shared-pool cluster: on which host, its name, its GPUs (or what
    it holds in the standing's unit)."""

    host: str
    name: str
    gpus: int


@dataclass(frozen=True)
class OverQuota:
    tenant: str
    gpu_class_id: int
    region: str
    standing: Standing
    dedicated_nodes: list[Holding]
    shared_clusters: list[Holding]
    unit: GrantUnit = WHOLE_GPUS  # what the standing and the holdings count in


def over_quota(db: Session) -> list[OverQuota]:
    """Every (tenant, class, region, unit) whose dedicated GPUs and shared-pool clusters pass
    its approved quota, by tenant, class, region and unit."""
    found = {key: standing for key, standing in every_standing(db).items() if standing.over}
    slugs = dict(db.execute(select(Tenant.id, Tenant.slug)
                            .where(Tenant.id.in_({key[0] for key in found}))).all())
    return [OverQuota(slugs.get(tenant, str(tenant)), class_id, region, standing,
                      _dedicated_nodes(db, tenant, class_id, region) if unit_of(key).is_whole
                      else [],
                      _shared_clusters(db, tenant, class_id, region, unit_of(key)),
                      unit_of(key))
            for key, standing in found.items() for tenant, class_id, region in [key[:3]]]


def _dedicated_nodes(db: Session, tenant_id: int, gpu_class_id: int,
                     region: str) -> list[Holding]:
    rows = db.execute(
        select(HostCluster.name, nodes.c.name, nodes.c.gpu_count)
        .join(node_assignments, (node_assignments.c.node_id == nodes.c.id)
              & node_assignments.c.ended_at.is_(None))
        .join(HostCluster, HostCluster.id == nodes.c.host_cluster_id)
        .where(node_assignments.c.tenant_id == tenant_id, nodes.c.gpu_class_id == gpu_class_id,
               nodes.c.gone_at.is_(None), HostCluster.region == region)
        .order_by(HostCluster.name, nodes.c.name))
    return [Holding(*row) for row in rows]


def _shared_clusters(db: Session, tenant_id: int, gpu_class_id: int, region: str,
                     unit: GrantUnit) -> list[Holding]:
    clusters = virtual_clusters.c
    rows = db.execute(
        select(HostCluster.name, clusters.name, clusters.amount)
        .join(HostCluster, HostCluster.id == clusters.host_cluster_id)
        .where(clusters.tenant_id == tenant_id, clusters.gpu_class_id == gpu_class_id,
               clusters.unit == unit.kind, clusters.mig_profile == unit.profile,
               clusters.placement == SHARED, clusters.amount > 0, HostCluster.region == region)
        .order_by(HostCluster.name, clusters.name))
    return [Holding(*row) for row in rows]
