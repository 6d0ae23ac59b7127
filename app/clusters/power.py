"""Sleep and wake: a tenant's idle cluster gives its GPUs back to the pool and comes back with
everything it held.

Asking is a change of the wanted state (``power``), audited, a new generation for the worker;
the worker scales the control plane to zero and removes the synced pods (as the open-source
``vcluster pause`` does), gives the leaf queue's guarantee back, and sets ``asleep_since``; waking
undoes it. Policies (idle, schedule) and a kubeconfig download ask through ``request``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from sqlalchemy.orm import Session

from app.audit import readable
from app.audit import service as audit
from app.clusters import repository
from app.clusters.models import VirtualCluster
from app.database.core import utcnow
from app.kit.errors import Conflict, NotFound
from app.workqueue import CLUSTERS, TENANT_QUEUES, enqueue, tenant_queue_key

AWAKE: Final = "awake"
ASLEEP: Final = "asleep"
SLEEP_REASONS: Final = ("manual", "idle", "schedule")
WAKE_REASONS: Final = ("manual", "kubeconfig", "schedule")
# Issue 57, v1: a private-nodes cluster does not sleep (docs/operator.md says why).
NO_SLEEP_FOR_PRIVATE_NODES: Final = (
    "a private-nodes cluster does not sleep: its GPUs are whole machines assigned to it, not "
    "lent to the pool while it sleeps; shrink or delete it to give them back")


def may_sleep(cluster: VirtualCluster) -> bool:
    return cluster.placement != "private-nodes"


def request(db: Session, cluster: VirtualCluster, power: str, reason: str, *,
            actor_id: int | None, actor_label: str,
            detail: Mapping[str, object] | None = None) -> bool:
    """Ask the worker to put the (locked) cluster to sleep or wake it; False if it was asked
    already. Audited as virtual_cluster.sleep or virtual_cluster.wake, with ``detail`` (what
    a policy read) added to the event's after."""
    if cluster.deletion_requested_at is not None:
        raise Conflict(f"cluster {cluster.name!r} is being deleted")
    if cluster.power == power:
        return False
    if power == ASLEEP and not may_sleep(cluster):
        raise Conflict(NO_SLEEP_FOR_PRIVATE_NODES)
    before = _power(cluster)
    cluster.power, cluster.power_reason, cluster.power_changed_at = power, reason, utcnow()
    if power == AWAKE:
        cluster.deletion_warned_at = cluster.deletion_due_at = None
    cluster.generation += 1
    enqueue(db, CLUSTERS, cluster.id)
    # A sleeping cluster's GPUs go back to the pool: its tenant's queue guarantees less.
    enqueue(db, TENANT_QUEUES, tenant_queue_key(cluster.tenant_id, cluster.host_cluster_id))
    db.flush()
    action = "virtual_cluster.sleep" if power == ASLEEP else "virtual_cluster.wake"
    audit.record(db, action=action, actor_id=actor_id, actor_label=actor_label,
                 tenant_id=cluster.tenant_id, target_type="virtual_cluster",
                 target_id=cluster.id, target_label=readable.cluster_label(cluster.name),
                 before=before, after={**_power(cluster), **(detail or {})})
    return True


def _power(cluster: VirtualCluster) -> dict[str, str | None]:
    changed = cluster.power_changed_at
    return {"power": cluster.power, "reason": cluster.power_reason,
            "changed_at": changed.isoformat() if changed else None}


def locked(db: Session, cluster: VirtualCluster) -> VirtualCluster:
    row = repository.lock_cluster(db, cluster.id)
    if row is None:
        raise NotFound(f"cluster {cluster.name!r} is gone")
    return row
