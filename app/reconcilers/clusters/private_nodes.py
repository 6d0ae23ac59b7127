"""A private-nodes cluster (issue 57) once its API server answers: the bootstrap group's
bindings inside it, then whole machines given for the GPUs it asks (``machine.assigned``) or
given back (``machine.released``). The machines kind does the rest for each machine (the
BareMetalHost, the token, the CSR, the Node): one owner per object. Asking it is enqueuing
the machine in the same transaction as the assignment.

Level-triggered: each pass compares the machines the cluster holds with its GPUs; a machine
another cluster took meanwhile is simply not given (the UPDATE's condition), and the next pass
tries the rest."""

from __future__ import annotations

from app.audit import readable
from app.clusters import conditions as cond
from app.kit.plurals import counted
from app.kit.sums import exact_parts
from app.kube.errors import KubeError
from app.kube.manifests import private_nodes as manifests
from app.kube.port import release
from app.machines import repository as machines_repository
from app.machines import service as machines_service
from app.reconcilers.clusters.results import ACTOR, Pass
from app.reconcilers.clusters.scope import ClusterScope

PRIVATE = "private-nodes"


def converge(scope: ClusterScope, ready: Pass) -> Pass:
    if scope.wanted.placement != PRIVATE:
        return ready
    try:
        _bootstrap_rbac(scope)
    except KubeError as error:
        return scope.failed(cond.NODE_BOOTSTRAP, error)
    _assign(scope)
    return ready


def _bootstrap_rbac(scope: ClusterScope) -> None:
    assert scope.kubeconfig is not None
    if cond.is_true(scope.conditions, cond.NODE_BOOTSTRAP) and scope.steady:
        return
    scope.check_lease()
    port = scope.deps.connector.virtual(scope.kubeconfig)
    try:
        for binding in manifests.bootstrap_rbac():
            port.apply(binding, force=True)
    finally:
        release(port)
    scope.set(cond.NODE_BOOTSTRAP, True, "Applied",
              f"group {manifests.BOOTSTRAP_GROUP} may ask for node certificates")


def _assign(scope: ClusterScope) -> None:
    """Whole free machines of the class on the cluster's host for the GPUs it lacks; machines
    beyond its GPUs given back, largest first."""
    wanted = scope.wanted
    label = readable.cluster_label(wanted.spec.name)
    with scope.deps.database.transaction() as db:
        scope.context.lease.fence(db)
        held = [m for m in machines_repository.machines_of_cluster(db, wanted.cluster_id)
                if m.desired == "private"]
        asked = wanted.spec.gpus if not wanted.deleting else 0
        missing = asked - sum(m.gpu_count for m in held)
        if missing > 0 and wanted.gpu_class_id is not None:
            free = machines_repository.free_machines(db, wanted.host_id, wanted.gpu_class_id)
            parts = exact_parts([m.gpu_count for m in free], missing)
            for index in parts or []:
                if machines_service.assign_to_cluster(db, free[index].id, wanted.cluster_id,
                                                      wanted.tenant_id, label, ACTOR):
                    missing -= free[index].gpu_count
        elif missing < 0:
            extra = sorted(held, key=lambda m: (-m.gpu_count, m.id))
            for index in exact_parts([m.gpu_count for m in extra], -missing) or []:
                row = machines_repository.machine_by_id(db, extra[index].id, lock=True)
                if row is not None and machines_service.release_from_cluster(
                        db, row, wanted.tenant_id, label, ACTOR, "the cluster asks fewer GPUs"):
                    missing += row.gpu_count
    if missing > 0:
        scope.set(cond.MACHINES_ASSIGNED, False, "WaitingForMachines",
                  f"{counted(missing, 'GPU')} of {asked} not yet on whole free machines of the "
                  "class on the cluster's host")
    else:
        scope.set(cond.MACHINES_ASSIGNED, True, "Assigned",
                  f"{counted(asked, 'GPU')} on the cluster's own machines")


def release_all(scope: ClusterScope) -> bool:
    """A cluster being deleted gives every machine back first; True once none is its any more
    (each back in the pool, wiped)."""
    wanted = scope.wanted
    label = readable.cluster_label(wanted.spec.name)
    with scope.deps.database.transaction() as db:
        scope.context.lease.fence(db)
        rows = machines_repository.machines_of_cluster(db, wanted.cluster_id)
        for row in rows:
            locked = machines_repository.machine_by_id(db, row.id, lock=True)
            if locked is not None:
                machines_service.release_from_cluster(db, locked, wanted.tenant_id, label,
                                                      ACTOR, "the cluster is being deleted")
    if rows:
        scope.set(cond.MACHINES_ASSIGNED, False, "Releasing",
                  f"waiting for {counted(len(rows), 'machine')} to be back in the pool")
    return not rows
