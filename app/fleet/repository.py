"""SQL the fleet's pages need beyond the capacity figures (app.gpu_classes.capacity)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from app.hosts.models import HostCluster
from app.tenants.models import Tenant


def live_cluster_states(db: Session) -> list[Any]:
    """Every cluster not being deleted, with its tenant, host, conditions and power: the
    admin home derives from them which fail or are stuck waking."""
    return list(
        db.execute(
            select(
                VirtualCluster.id,
                Tenant.slug.label("tenant"),
                VirtualCluster.name,
                HostCluster.name.label("host_cluster"),
                VirtualCluster.conditions,
                VirtualCluster.power,
                VirtualCluster.power_changed_at,
            )
            .join(Tenant, Tenant.id == VirtualCluster.tenant_id)
            .join(HostCluster, HostCluster.id == VirtualCluster.host_cluster_id)
            .where(VirtualCluster.deletion_requested_at.is_(None))
            .order_by(Tenant.slug, VirtualCluster.name)
        )
    )
