"""Taking a cluster down: uninstall the release, delete what the portal made, then the row."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.clusters import conditions as cond
from app.clusters import events, repository
from app.kube import manifests
from app.kube.errors import KubeError
from app.kube.helm import InstallError
from app.kube.port import ObjectRef
from app.reconcilers.clusters.results import ACTOR, Pass

if TYPE_CHECKING:
    from app.reconcilers.clusters.run import ClusterRun


def delete(run: ClusterRun) -> Pass:
    wanted = run.wanted
    with run.owner.database.transaction() as db:
        events.cluster_deleting.fire(db, events.ClusterDeleting(wanted.cluster_id, ACTOR))
    if run.where.port is None:
        if any(cond.find(wanted.conditions, t) for t in cond.STEP_TYPES):
            run.set(cond.READY, False, "HostClusterNotConfigured",
                    "cannot remove what was applied while no host cluster is configured")
            return Pass()
        return _remove_row(run)
    try:
        if not _take_down(run):
            run.set(cond.READY, False, "Deleting",
                    f"waiting for namespace {wanted.namespace} to terminate")
            return Pass(next_in=run.owner.wait_seconds)
    except (KubeError, InstallError) as error:
        return run.failed(cond.READY, error)
    return _remove_row(run)


def _take_down(run: ClusterRun) -> bool:
    """Uninstall, then delete what the portal made; True once the namespace is gone."""
    spec, namespace = run.wanted.spec, run.wanted.namespace
    run.host.get("v1", "Namespace", namespace)  # the host answers, before helm is run
    run.check_lease()
    run.save_conditions()
    run.where.installer.uninstall(run.wanted.release, namespace)
    run.check_lease()
    queue_version = manifests.labels.KAI_API_VERSION
    doomed = [ObjectRef("v1", "Namespace", namespace),
              ObjectRef(queue_version, "Queue",
                        manifests.cluster_queue_name(spec.tenant, spec.name))]
    if run.wanted.last_of_tenant:
        doomed.append(ObjectRef(queue_version, "Queue",
                                manifests.tenant_queue_name(spec.tenant)))
    cache = run.owner.cache(run.where.id, run.host)
    for ref in doomed:
        run.host.delete(ref.api_version, ref.kind, ref.name, ref.namespace)
        if cache is not None:
            cache.forgot(ref)
    # The tenant queue may be gone: the next cluster of the tenant applies it again.
    run.owner.shared.forget(run.where.id)
    return run.host.get("v1", "Namespace", namespace) is None


def _remove_row(run: ClusterRun) -> Pass:
    with run.owner.database.transaction() as db:
        run.context.lease.fence(db)
        cluster = repository.lock_cluster(db, run.wanted.cluster_id)
        if cluster is None:
            return Pass(deleted=True)
        before = {"name": cluster.name, "gpus": cluster.gpus,
                  "gpu_class_id": cluster.gpu_class_id, "generation": cluster.generation}
        run.audit(db, "virtual_cluster.deleted", before, None)
        events.cluster_row_deleting.fire(db, events.ClusterDeleting(cluster.id, ACTOR))
        repository.delete_cluster_row(db, cluster.id)
    return Pass(deleted=True)
