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
from app.quotas.burst import tenant_burst
from app.workqueue import CLUSTERS, TENANT_QUEUES, enqueue_many, tenant_queue_key


@quota_events.quota_changed.connect
def queues_of_a_changed_quota(db: Session, event: quota_events.QuotaChanged) -> None:
    """The tenant's queue on every host it has clusters on (its guarantee per class); its
    clusters too while it bursts, as their queues' ceiling is the tenant's."""
    _enqueue_tenant_queues_of(db, event.tenant_id)
    if tenant_burst(db, event.tenant_id).burst_gpus != 0:
        _enqueue_clusters_of(db, event.tenant_id)


@quota_events.burst_changed.connect
def queues_of_a_changed_burst(db: Session, event: quota_events.BurstChanged) -> None:
    """The tenant's queues (its ceiling and weights) and every cluster of the tenant, whose
    own queue and quota follow the tenant's ceiling."""
    _enqueue_tenant_queues_of(db, event.tenant_id)
    _enqueue_clusters_of(db, event.tenant_id)


def _enqueue_tenant_queues_of(db: Session, tenant_id: int) -> None:
    enqueue_many(db, TENANT_QUEUES, [tenant_queue_key(tenant, host)
                                     for tenant, host in clusters.tenant_hosts(db, tenant_id)])


def _enqueue_clusters_of(db: Session, tenant_id: int) -> None:
    of_tenant = clusters.clusters_query(tenant_id).subquery()
    enqueue_many(db, CLUSTERS, db.scalars(select(of_tenant.c.id)))
