"""Which clusters sleep across the fleet, why and since when, and when a sleep policy deletes
them (platform admins)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.authz import ensure_platform_admin
from app.clusters.models import VirtualCluster
from app.clusters.sleep_policy import deletes_at
from app.fleet.schemas import SleepingClusterOut
from app.hosts.models import HostCluster
from app.http.pagination import Page, PageParams, paginate_rows
from app.tenants.models import Tenant


def _query() -> Any:
    return (select(VirtualCluster.id, Tenant.slug.label("tenant"), VirtualCluster.name,
                   HostCluster.name.label("host_cluster"), VirtualCluster.gpus,
                   VirtualCluster.power, VirtualCluster.power_reason,
                   VirtualCluster.power_changed_at, VirtualCluster.asleep_since,
                   VirtualCluster.never_sleep, VirtualCluster.delete_after_sleep_days,
                   VirtualCluster.deletion_warned_at, VirtualCluster.deletion_due_at)
            .join(Tenant, Tenant.id == VirtualCluster.tenant_id)
            .join(HostCluster, HostCluster.id == VirtualCluster.host_cluster_id)
            .where(VirtualCluster.power == "asleep",
                   VirtualCluster.deletion_requested_at.is_(None)))


def sleeping_clusters(db: Session, principal: Principal,
                      params: PageParams) -> Page[SleepingClusterOut]:
    ensure_platform_admin(principal)
    rows, cursor = paginate_rows(db, _query(), VirtualCluster.id, params)
    return Page(items=[_out(row) for row in rows], next_cursor=cursor)


def _out(row: Any) -> SleepingClusterOut:
    return SleepingClusterOut(
        tenant=row.tenant, cluster=row.name, host_cluster=row.host_cluster, gpus=row.gpus,
        reason=row.power_reason, asked_at=row.power_changed_at, asleep_since=row.asleep_since,
        deletion_warned_at=row.deletion_warned_at, deletes_at=deletes_at(row))
