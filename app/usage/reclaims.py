"""Pods KAI Scheduler took from the tenants' clusters, into their audit trail: which pod,
whose, and why (KAI's action and the evicted queue's own figures). The other side of a
reclaim is another tenant: its name stays out of this tenant's trail."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit import readable
from app.audit import service as audit
from app.kube.evictions import Eviction
from app.kube.manifests.names import host_namespace_name
from app.usage import samples
from app.usage.models import GpuReclaim

ACTOR: Final = "kai-scheduler"
WHY: Final = {
    "reclaim": "borrowed GPUs taken back for another queue within its guarantee",
    "preempt": "preempted by a higher-priority workload of the same queue",
    "consolidation": "moved to pack the pool's GPUs tighter",
}


def record_evictions(db: Session, host_id: int, evictions: Sequence[Eviction]) -> int:
    """Each eviction of a pod of a cluster on the host, once (KAI keeps its events an hour;
    the worker reads them each resync); returns how many were new."""
    placed = samples.clusters_by_name(db, host_id)
    owners = {host_namespace_name(tenant, name): owner for (tenant, name), owner in placed.items()}
    names = {host_namespace_name(tenant, name): name for tenant, name in placed}
    ours = [e for e in evictions if e.namespace in owners and e.uid]
    if not ours:
        return 0
    known = set(db.scalars(select(GpuReclaim.event_uid)
                           .where(GpuReclaim.event_uid.in_([e.uid for e in ours]))))
    new = [e for e in ours if e.uid not in known]
    for found in new:
        owner = owners[found.namespace]
        db.add(GpuReclaim(event_uid=found.uid, tenant_id=owner.tenant_id,
                          cluster_id=owner.subject_id, pod=found.virtual_pod,
                          action=found.action))
        audit.record(db, action="cluster.gpu_reclaimed", actor_id=None, actor_label=ACTOR,
                     tenant_id=owner.tenant_id, target_type="cluster",
                     target_id=owner.subject_id,
                     target_label=readable.cluster_label(names[found.namespace]),
                     after={"pod": found.virtual_pod, "action": found.action,
                            "why": WHY.get(found.action, found.action),
                            "queue": found.queue_line, "at": found.at})
    return len(new)
