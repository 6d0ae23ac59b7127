"""Asking for a cluster's deletion: by a tenant admin (``service.delete_cluster``) or by its
sleep policy after its days asleep (``sleep_policy``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.audit import readable
from app.audit import service as audit
from app.clusters.models import VirtualCluster
from app.database.core import utcnow
from app.workqueue import CLUSTERS, enqueue


def request_deletion(db: Session, cluster: VirtualCluster, before: dict[str, Any], *,
                     actor_id: int | None, actor_label: str, reason: str | None = None) -> bool:
    """Asks the worker to take the (locked) cluster down; False if it was asked already.
    Audited as virtual_cluster.delete, ``before`` being the cluster's spec (with ``reason``
    when the asker has one to give)."""
    if cluster.deletion_requested_at is not None:
        return False
    cluster.deletion_requested_at = utcnow()
    cluster.generation += 1
    enqueue(db, CLUSTERS, cluster.id)
    db.flush()
    after: dict[str, Any] = {"deletion_requested_at": cluster.deletion_requested_at.isoformat()}
    if reason:
        after["reason"] = reason
    audit.record(db, action="virtual_cluster.delete", actor_id=actor_id,
                 actor_label=actor_label, tenant_id=cluster.tenant_id,
                 target_type="virtual_cluster", target_id=cluster.id,
                 target_label=readable.cluster_label(cluster.name), before=before,
                 after=after)
    return True


def spec_of(cluster: VirtualCluster) -> dict[str, Any]:
    return {"name": cluster.name, "kubernetes_version": cluster.kubernetes_version,
            "placement": cluster.placement, "gpu_class_id": cluster.gpu_class_id,
            "gpus": cluster.gpus, "cpu_millicores": cluster.cpu_millicores,
            "memory_mib": cluster.memory_mib, "generation": cluster.generation,
            "template_version_id": cluster.template_version_id,
            "pod_security": cluster.pod_security, "user_namespaces": cluster.user_namespaces,
            "addons": [f"{a['name']} {a['chart']} {a['version']}" for a in cluster.addons or []]}
