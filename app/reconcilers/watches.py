"""What a change elsewhere enqueues: the keys of a kind whose desired state derives from it.

Like controller-runtime's ``Watches(source, EnqueueRequestsFromMapFunc(...))``: a lower domain
announces a change through its hook (``app.kit.hooks``), and the mapping from the changed object to
the keys to reconcile lives here, with the kinds, so the lower domain knows nothing of them.
Listeners run in the changing transaction: the keys are due when it commits, never before,
and not at all if it rolls back. ``app.process.wiring.connect_hooks`` connects them in every
process.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.clusters import repository as clusters
from app.quotas import events as quota_events
from app.workqueue import CLUSTERS, enqueue_many


@quota_events.quota_changed.connect
def clusters_of_a_changed_quota(db: Session, event: quota_events.QuotaChanged) -> None:
    """Every cluster of the tenant: the tenant's queue (its quota per class) is kept by each of
    its clusters' reconciles, and each cluster's own quota derives from the tenant's."""
    _enqueue_clusters_of(db, event.tenant_id)


@quota_events.burst_changed.connect
def clusters_of_a_changed_burst(db: Session, event: quota_events.BurstChanged) -> None:
    """Every cluster of the tenant: each keeps the tenant's queue and its own leaf and quota,
    whose ceilings follow the burst."""
    _enqueue_clusters_of(db, event.tenant_id)


def _enqueue_clusters_of(db: Session, tenant_id: int) -> None:
    of_tenant = clusters.clusters_query(tenant_id).subquery()
    enqueue_many(db, CLUSTERS, db.scalars(select(of_tenant.c.id)))
