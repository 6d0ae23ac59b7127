"""Clusters left above a quota that shrank (it expired) are flagged, never deleted: their
owners decide what to shrink. Above means the tenant's dedicated GPUs and shared-pool clusters
pass the quota (``Standing.over``)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.audit import readable
from app.audit import service as audit
from app.clusters import repository
from app.quotas import events as quota_events


@quota_events.quota_shrunk.connect
def flag_clusters_over_quota(db: Session, event: quota_events.QuotaShrunk) -> None:
    standing = repository.standings(db, event.tenant_id, event.gpu_class_id).get(event.region)
    if standing is None or standing.over == 0:
        return
    for cluster in repository.clusters_with_gpus(db, event.tenant_id, event.gpu_class_id,
                                                 event.region):
        if cluster.over_quota:
            continue
        cluster.over_quota = True
        event.over_quota_cluster_ids.append(cluster.id)
        audit.record(db, action="virtual_cluster.over_quota", actor_id=event.actor_id,
                     actor_label=event.actor_label, tenant_id=event.tenant_id,
                     target_type="virtual_cluster", target_id=cluster.id,
                     target_label=readable.cluster_label(cluster.name),
                     before={"over_quota": False},
                     after={"over_quota": True, "gpus": cluster.gpus,
                            "quota_gpus": event.quota_gpus, "region": event.region})
    db.flush()
