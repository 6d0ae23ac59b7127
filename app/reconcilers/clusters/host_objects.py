"""The cluster's objects on its host, in order: its namespace, quota, network policies and KAI
queue, each step setting its condition. An awake cluster and a sleeping one both keep them."""

from __future__ import annotations

from collections.abc import Callable

from app.clusters import conditions as cond
from app.kube import manifests, quantities
from app.kube.errors import KubeError, TransientKubeError
from app.kube.manifests import InvalidSpec
from app.kube.port import Manifest, ObjectRef
from app.reconcilers.clusters.results import Pass
from app.reconcilers.clusters.scope import ClusterScope


def apply(scope: ClusterScope) -> Pass | None:
    """None once every object is applied, else how the pass ends."""
    steps: list[tuple[str, Callable[[ClusterScope], tuple[str, str]]]] = [
        (cond.NAMESPACE_READY, _namespace),
        (cond.QUOTA_APPLIED, _quota),
        (cond.NETWORK_POLICY_APPLIED, _network_policies),
        (cond.QUEUES_APPLIED, _queues),
    ]
    for type_, step in steps:
        try:
            reason, message = step(scope)
        except (KubeError, InvalidSpec) as error:
            return scope.failed(type_, error)
        scope.set(type_, True, reason, message)
    return None


def _objects(scope: ClusterScope, *kinds: str) -> list[Manifest]:
    return [obj for obj in scope.wanted.host_objects() if obj["kind"] in kinds]


def _namespace(scope: ClusterScope) -> tuple[str, str]:
    namespace = scope.wanted.namespace
    for live in ensure(scope, _objects(scope, "Namespace")):
        if (live.get("metadata") or {}).get("deletionTimestamp"):
            # Deleted behind the portal's back: nothing can be made in it until it is gone,
            # then a pass makes it again, and installs the release that went with it.
            scope.set(cond.RELEASE_INSTALLED, False, "NamespaceTerminating",
                      "the release is removed with its namespace")
            raise TransientKubeError(f"namespace {namespace} is being deleted; it is made "
                                     "again once it is gone", reason="NamespaceTerminating")
    return "Applied", f"namespace {namespace}"


def _quota(scope: ClusterScope) -> tuple[str, str]:
    ensure(scope, _objects(scope, "ResourceQuota", "LimitRange"))
    spec = scope.wanted.spec
    return "Applied", (f"ResourceQuota: {spec.gpus} GPUs, {spec.cpu_millicores}m CPU, "
                       f"{spec.memory_mib} MiB memory; LimitRange defaults")


def _network_policies(scope: ClusterScope) -> tuple[str, str]:
    ensure(scope, _objects(scope, "NetworkPolicy"))
    return "Applied", "traffic from other tenants' namespaces is denied"


def _queues(scope: ClusterScope) -> tuple[str, str]:
    spec = scope.wanted.spec
    queue = manifests.cluster_queue_name(spec.tenant, spec.name)
    queues = _objects(scope, "Queue")
    # The root and tenant queues and the guards are shared by many clusters.
    ensure(scope, [*manifests.platform_objects(scope.wanted.policy),
                   *(q for q in queues if q["metadata"]["name"] != queue)], shared=True)
    ensure(scope, [q for q in queues if q["metadata"]["name"] == queue])
    return "Applied", f"KAI queue {queue} under {scope.wanted.tenant.slug}"


def ensure(scope: ClusterScope, objects: list[Manifest], *,
           shared: bool = False) -> list[Manifest]:
    """Apply what is missing or differs; the live objects it read or wrote. An object
    many clusters share is applied once while it stays the same (``SharedObjects``)."""
    seen = []
    cache = scope.cache
    memo = scope.deps.shared
    host_id = scope.where.id
    for ref, obj in {ObjectRef.of(obj): obj for obj in objects}.items():
        with memo.ensuring(host_id, ref):
            if shared and memo.applied(host_id, ref, obj):
                continue
            live = _read(scope, ref) if scope.steady else None
            if not scope.steady or quantities.drifted(live, obj):
                scope.check_lease()
                # The portal owns these objects outright: take back fields others set.
                live = scope.host.apply(obj, force=True)
                if cache is not None:
                    cache.stored(live)
            if shared:
                memo.remember(host_id, ref, obj)
        if live is not None:
            seen.append(live)
    return seen


def _read(scope: ClusterScope, ref: ObjectRef) -> Manifest | None:
    cache = scope.cache
    if cache is not None and cache.covers(ref):
        return cache.get(ref)
    return scope.host.get(ref.api_version, ref.kind, ref.name, ref.namespace)
