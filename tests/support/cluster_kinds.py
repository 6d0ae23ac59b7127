"""The cluster kind as the worker runs it: beside the kinds that make what its clusters wait
for (their tenant's queue, their host's root queue and guards), driven one inline pass at a
time as one worker (``worker_id``) would."""

from __future__ import annotations

from weakref import WeakKeyDictionary

from app.database.core import utcnow
from app.reconcilers.clusters import ClusterReconciler
from app.reconcilers.kind import Kind
from app.reconcilers.platform_objects import PlatformObjectsReconciler
from app.reconcilers.runtime import Runtime
from app.reconcilers.tenant_queues import TenantQueueReconciler
from app.workqueue import CLUSTERS, PLATFORM_OBJECTS, TENANT_QUEUES

SHARED = (TENANT_QUEUES, PLATFORM_OBJECTS)
_RUNTIMES: WeakKeyDictionary[ClusterReconciler, dict[str, Runtime]] = WeakKeyDictionary()


def cluster_kinds(reconciler: ClusterReconciler) -> list[Kind]:
    """The three kinds, the shared ones on the cluster kind's settings, database and host."""
    made_from = (reconciler.settings, reconciler.database, reconciler.connector)
    return [TenantQueueReconciler(*made_from), PlatformObjectsReconciler(*made_from), reconciler]


def runtime_of(reconciler: ClusterReconciler, worker_id: str = "worker") -> Runtime:
    """One runtime per worker id, as if each were a worker process of its own."""
    runtimes = _RUNTIMES.setdefault(reconciler, {})
    if worker_id not in runtimes:
        runtimes[worker_id] = Runtime(
            reconciler.database, cluster_kinds(reconciler), identity=worker_id,
            lease_seconds=reconciler.settings.worker_lease_seconds,
            clock=getattr(reconciler, "now", utcnow))
    return runtimes[worker_id]


def run_cluster_kinds(reconciler: ClusterReconciler, worker_id: str = "worker") -> int:
    """One pass of what is due: the shared objects first (as a worker's pool would have made
    them by the time a cluster looks), the clusters, then what the clusters asked for (a
    tenant's queue once its last cluster is gone); how many items ran."""
    runtime = runtime_of(reconciler, worker_id)
    return (runtime.run_pass(SHARED) + runtime.run_pass([CLUSTERS])
            + runtime.run_pass(SHARED))
