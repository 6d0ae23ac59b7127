"""What a tenant may create: at most ``PORTAL_TENANT_MAX_CLUSTERS`` clusters, none empty.

The count is read under a lock of the tenant's row (a create's first lock: tenant, then its
quota rows, then a cluster's row), so two creates at once cannot both take the last place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from app.clusters import repository
from app.clusters.schemas import ClusterCreate
from app.database.concurrency import lock_row
from app.kit.config import Settings
from app.kit.errors import ValidationFailed
from app.kit.limits import Limit
from app.tenants.models import Tenant

RESOURCES = ("gpus", "cpu_millicores", "memory_mib")


def clusters_limit(settings: Settings) -> Limit:
    return Limit("clusters", "clusters", "PORTAL_TENANT_MAX_CLUSTERS",
                 settings.tenant_max_clusters)


def ensure_room_for_a_cluster(db: Session, settings: Settings, tenant: Tenant,
                              payload: ClusterCreate, *, lock: bool) -> None:
    """Without ``lock`` (a form's checks as it is filled in), it reads and locks nothing."""
    refuse_empty(payload.model_dump())
    if lock:
        lock_row(db, Tenant, tenant.id, keys_free=True)
    clusters_limit(settings).ensure_room(repository.cluster_count(db, tenant.id),
                                         f"tenant {tenant.slug}", "delete one first")


def refuse_empty(spec: Mapping[str, Any]) -> None:
    """A cluster with no GPUs, no CPU and no memory runs nothing yet costs a control plane on
    the host: refused rather than given a minimum the tenant did not ask for."""
    if all(not spec.get(resource) for resource in RESOURCES):
        raise ValidationFailed(
            "a cluster needs some resources: GPUs, CPU or memory above 0",
            errors=[{"field": resource, "message": "GPUs, CPU and memory are all 0"}
                    for resource in RESOURCES])
