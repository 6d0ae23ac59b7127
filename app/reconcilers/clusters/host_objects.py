"""The cluster's objects on its host, in order: its namespace, quota, network policies and KAI
queue, each step setting its condition. An awake cluster and a sleeping one both keep them.

The objects it shares are other kinds' to write: its queue's parent (the tenant's queue, kind
``tenant-queues``) and the root queue and guards of its host (``platform-objects``). The queue
step waits until those are there, asking their kinds for them, so that no pod of the cluster
runs before the guards that hold it."""

from __future__ import annotations

from collections.abc import Callable

from app.clusters import conditions as cond
from app.kube import manifests, quantities
from app.kube.errors import KubeError, TransientKubeError
from app.kube.manifests import InvalidSpec
from app.kube.manifests.units import share_text
from app.kube.port import Manifest, ObjectRef
from app.reconcilers.clusters.results import Pass
from app.reconcilers.clusters.scope import ClusterScope
from app.workqueue import PLATFORM_OBJECTS, TENANT_QUEUES, ask, tenant_queue_key


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
        except _Waiting as waiting:
            scope.set(type_, False, waiting.reason, waiting.message)
            return Pass(next_in=scope.deps.wait_seconds)
        except (KubeError, InvalidSpec) as error:
            return scope.failed(type_, error)
        scope.set(type_, True, reason, message)
    return None


class _Waiting(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _objects(scope: ClusterScope, *kinds: str) -> list[Manifest]:
    return [obj for obj in scope.wanted.own_objects() if obj["kind"] in kinds]


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
    return "Applied", (f"ResourceQuota: {quota_gpu_words(spec)}, {spec.cpu_millicores}m CPU, "
                       f"{spec.memory_mib} MiB memory; LimitRange defaults")


def quota_gpu_words(spec: manifests.ClusterSpec) -> str:
    """What the quota gives the cluster's pods of GPUs, as the condition says it."""
    if spec.gpu_unit == "mig":
        return f"{spec.amount} slices of {spec.mig_profile}"
    if spec.gpu_unit == "share":
        return f"a share of {share_text(spec.amount or 0)} of one GPU"
    return f"{spec.gpus} GPUs"


def _network_policies(scope: ClusterScope) -> tuple[str, str]:
    ensure(scope, _objects(scope, "NetworkPolicy"))
    return "Applied", "traffic from other tenants' namespaces is denied"


def _queues(scope: ClusterScope) -> tuple[str, str]:
    wanted = scope.wanted
    # Built only to be checked: a tenant slug the builders refuse is the tenant's to see.
    parent = ObjectRef.of(manifests.tenant_queue(wanted.tenant, wanted.policy))
    ensure(scope, _objects(scope, "Queue"))
    queue = manifests.cluster_queue_name(wanted.spec.tenant, wanted.spec.name)
    if not _on_host(scope, parent):
        _ask(scope, TENANT_QUEUES, tenant_queue_key(wanted.tenant_id, scope.where.id))
        raise _Waiting("WaitingForTenantQueue", f"KAI queue {queue} waits for its tenant's "
                       f"queue {parent.name}, which the worker makes")
    shared = [ObjectRef.of(obj) for obj in manifests.platform_objects(wanted.policy)]
    missing = [ref for ref in shared if not scope.steady and not _on_host(scope, ref)]
    if missing:
        _ask(scope, PLATFORM_OBJECTS, str(scope.where.id))
        raise _Waiting("WaitingForGuards", f"waiting for {missing[0].kind} {missing[0].name} "
                       f"on host cluster {scope.where.name}, which the worker makes")
    return "Applied", f"KAI queue {queue} under {wanted.tenant.slug}"


def _on_host(scope: ClusterScope, ref: ObjectRef) -> bool:
    """Whether the object is on the host; a snapshot that lacks it is asked again (another
    kind may have made it since)."""
    cache = scope.cache
    if cache is not None and cache.covers(ref) and cache.get(ref) is not None:
        return True
    return scope.host.get(ref.api_version, ref.kind, ref.name, ref.namespace) is not None


def _ask(scope: ClusterScope, kind: str, key: str) -> None:
    """The object's own kind makes it: the cluster only asks for it (never sooner than that
    kind's backoff, when it is failing)."""
    with scope.deps.database.transaction() as db:
        ask(db, kind, key)


def ensure(scope: ClusterScope, objects: list[Manifest]) -> list[Manifest]:
    """Apply what is missing or differs; the live objects it read or wrote."""
    seen = []
    cache = scope.cache
    for ref, obj in {ObjectRef.of(obj): obj for obj in objects}.items():
        live = _read(scope, ref) if scope.steady else None
        if not scope.steady or quantities.drifted(live, obj):
            scope.check_lease()
            # The portal owns these objects outright: take back fields others set.
            live = scope.host.apply(obj, force=True)
            if cache is not None:
                cache.stored(live)
        if live is not None:
            seen.append(live)
    return seen


def _read(scope: ClusterScope, ref: ObjectRef) -> Manifest | None:
    cache = scope.cache
    if cache is not None and cache.covers(ref):
        return cache.get(ref)
    return scope.host.get(ref.api_version, ref.kind, ref.name, ref.namespace)
