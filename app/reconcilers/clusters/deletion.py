"""Taking a cluster down: uninstall the release, delete what the portal made, then the row."""

from __future__ import annotations

from app.clusters import conditions as cond
from app.clusters import events, repository
from app.kube import manifests
from app.kube.errors import KubeError
from app.kube.helm import InstallError
from app.kube.port import ObjectRef
from app.reconcilers.clusters import private_nodes
from app.reconcilers.clusters.results import ACTOR, Pass
from app.reconcilers.clusters.scope import ClusterScope
from app.workqueue import TENANT_QUEUES, enqueue, tenant_queue_key


def delete(scope: ClusterScope) -> Pass:
    wanted = scope.wanted
    with scope.deps.database.transaction() as db:
        events.cluster_deleting.fire(db, events.ClusterDeleting(wanted.cluster_id, ACTOR))
    if scope.where.port is None:
        if any(cond.find(wanted.conditions, t) for t in cond.STEP_TYPES):
            scope.set(cond.READY, False, "HostClusterNotConfigured",
                    "cannot remove what was applied while no host cluster is configured")
            return Pass()
        return _remove_row(scope)
    if wanted.placement == private_nodes.PRIVATE and not private_nodes.release_all(scope):
        # Its machines are drained out of it and wiped first: the virtual cluster must still
        # be there for that.
        return Pass(next_in=scope.deps.wait_seconds)
    try:
        if not _take_down(scope):
            scope.set(cond.READY, False, "Deleting",
                    f"waiting for namespace {wanted.namespace} to terminate")
            return Pass(next_in=scope.deps.wait_seconds)
    except (KubeError, InstallError) as error:
        return scope.failed(cond.READY, error)
    return _remove_row(scope)


def _take_down(scope: ClusterScope) -> bool:
    """Uninstall, then delete what the portal made; True once the namespace is gone."""
    spec, namespace = scope.wanted.spec, scope.wanted.namespace
    scope.host.get("v1", "Namespace", namespace)  # the host answers, before helm is run
    scope.check_lease()
    scope.save_conditions()
    scope.where.installer.uninstall(scope.wanted.release, namespace)
    scope.check_lease()
    # Its tenant's queue stays while the tenant has another cluster on the host; the
    # tenant-queues kind removes it once the row is gone (``_remove_row`` asks it).
    doomed = [ObjectRef("v1", "Namespace", namespace),
              ObjectRef(manifests.labels.KAI_API_VERSION, "Queue",
                        manifests.cluster_queue_name(spec.tenant, spec.name))]
    cache = scope.cache
    for ref in doomed:
        scope.host.delete(ref.api_version, ref.kind, ref.name, ref.namespace)
        if cache is not None:
            cache.forgot(ref)
    return scope.host.get("v1", "Namespace", namespace) is None


def _remove_row(scope: ClusterScope) -> Pass:
    with scope.deps.database.transaction() as db:
        scope.context.lease.fence(db)
        cluster = repository.lock_cluster(db, scope.wanted.cluster_id)
        if cluster is None:
            return Pass(deleted=True)
        before = {"name": cluster.name, "gpus": cluster.gpus,
                  "gpu_class_id": cluster.gpu_class_id, "generation": cluster.generation}
        scope.audit(db, "virtual_cluster.deleted", before, None)
        events.cluster_row_deleting.fire(db, events.ClusterDeleting(cluster.id, ACTOR))
        repository.delete_cluster_row(db, cluster.id)
        enqueue(db, TENANT_QUEUES, tenant_queue_key(cluster.tenant_id, cluster.host_cluster_id))
    return Pass(deleted=True)
