"""A cluster's sleep on its host, and its waking: what the open-source ``vcluster pause`` and
``vcluster resume`` do, done by the worker.

Asleep: the namespace, its quota and queues stay (the queues with no guarantee: the GPUs go back
to the pool), the control plane's StatefulSet is scaled to zero with vCluster's own pause
annotations (so ``vcluster resume`` would also wake it), and the pods the syncer made are
deleted. The virtual cluster's data store (its volume) is kept, so its objects are there when it
wakes. Awake again: the StatefulSet gets its replicas back, and the syncer makes the pods
anew. Every step is level-triggered: a pass that stopped half-way is finished by the next.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from app.clusters import conditions as cond
from app.kube.errors import KubeError
from app.kube.manifests import InvalidSpec
from app.kube.manifests import labels as lbl
from app.kube.port import Manifest
from app.reconcilers.clusters import host_objects
from app.reconcilers.clusters.results import Pass
from app.reconcilers.clusters.scope import ClusterScope

# vCluster's own pause annotations (pkg/constants/annotation.go of vCluster 0.30).
PAUSED: Final = "loft.sh/paused"
PAUSED_REPLICAS: Final = "loft.sh/paused-replicas"
PAUSED_DATE: Final = "loft.sh/paused-date"


def sleep(scope: ClusterScope) -> Pass:
    steps = host_objects.apply(scope)
    if steps is not None:
        return steps
    try:
        stopped = _scale_down(scope)
        removed = _remove_synced_pods(scope)
    except (KubeError, InvalidSpec) as error:
        return scope.failed(cond.ASLEEP, error)
    if not stopped:
        scope.set(cond.READY, False, "FallingAsleep",
                 "the control plane is stopping; its pods were removed from the host")
        return Pass(next_in=scope.deps.wait_seconds)
    since = _fell_asleep(scope)
    reason = scope.wanted.power_reason or "manual"
    scope.set(cond.ASLEEP, True, "Sleeping",
            f"asleep since {since:%Y-%m-%d %H:%M} UTC ({reason}); {removed} pods removed from "
            "the host this pass; the GPU guarantee is back in the pool")
    scope.set(cond.READY, False, "Sleeping", "the control plane is scaled to zero; wake the "
            "cluster to use it (a kubeconfig download wakes it too)")
    return Pass(converged=True)


def wake(scope: ClusterScope) -> None:
    """Before the release step of a cluster that slept: the control plane gets its replicas
    back (the release itself is unchanged, so helm is not run for it)."""
    live = _statefulset(scope)
    if live is None or not _paused(live):
        return
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    replicas = _replicas(annotations.get(PAUSED_REPLICAS))
    scope.check_lease()
    scope.host.apply(_scale(scope, replicas, {PAUSED: None, PAUSED_REPLICAS: None,
                                          PAUSED_DATE: None}), force=True)


def woke(scope: ClusterScope) -> None:
    """The cluster answers again: its Asleep condition turns False, and it is recorded."""
    if cond.is_true(scope.conditions, cond.ASLEEP):
        scope.set(cond.ASLEEP, False, "Awake", "woke up: the control plane answers again")
        _woke_up(scope)


def _fell_asleep(scope: ClusterScope) -> datetime:
    """When the cluster fell asleep: recorded (and audited) by the pass that saw it."""
    if scope.wanted.asleep_since is not None:
        return scope.wanted.asleep_since
    since = scope.now()
    with scope.deps.database.transaction() as db:
        scope.write(db, asleep_since=since)
        scope.audit(db, "virtual_cluster.asleep", None,
                    {"since": since.isoformat(), "reason": scope.wanted.power_reason})
    return since


def _woke_up(scope: ClusterScope) -> None:
    with scope.deps.database.transaction() as db:
        scope.write(db, asleep_since=None)
        scope.audit(db, "virtual_cluster.awake", None, {"reason": scope.wanted.power_reason})


def _scale_down(scope: ClusterScope) -> bool:
    """The StatefulSet at zero replicas with vCluster's pause annotations; True once no
    control-plane pod is left (or there was never a StatefulSet)."""
    live = _statefulset(scope)
    if live is None:
        return True
    spec_replicas = int((live.get("spec") or {}).get("replicas") or 0)
    if not _paused(live) or spec_replicas != 0:
        before = spec_replicas or 1
        scope.check_lease()
        live = scope.host.apply(_scale(scope, 0, {
            PAUSED: "true", PAUSED_REPLICAS: str(before),
            PAUSED_DATE: f"{scope.now():%Y-%m-%dT%H:%M:%S.000Z}"}), force=True)
    return int((live.get("status") or {}).get("replicas") or 0) == 0


def _remove_synced_pods(scope: ClusterScope) -> int:
    """The pods vCluster's syncer made for the tenant's workloads (its own marker label); the
    virtual cluster keeps them as objects, and makes them again when it wakes."""
    pods = scope.host.list("v1", "Pod", scope.wanted.namespace,
                         label_selector={lbl.VCLUSTER_SYNCED_MARKER: scope.wanted.release})
    removed = 0
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        scope.check_lease()
        removed += scope.host.delete("v1", "Pod", pod["metadata"]["name"], scope.wanted.namespace)
    return removed


def _statefulset(scope: ClusterScope) -> Manifest | None:
    return scope.host.get("apps/v1", "StatefulSet", scope.wanted.release, scope.wanted.namespace)


def _paused(live: Manifest) -> bool:
    return ((live.get("metadata") or {}).get("annotations") or {}).get(PAUSED) == "true"


def _replicas(value: str | None) -> int:
    return int(value) if value and value.isdigit() and int(value) > 0 else 1


def _scale(scope: ClusterScope, replicas: int, annotations: dict[str, Any]) -> Manifest:
    """Only what sleep changes: the replicas and the pause annotations (None removes one)."""
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": scope.wanted.release, "namespace": scope.wanted.namespace,
                         "annotations": {k: v for k, v in annotations.items() if v is not None}},
            "spec": {"replicas": replicas}}
