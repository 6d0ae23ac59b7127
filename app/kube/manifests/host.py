"""Namespaced host objects of one virtual cluster: Namespace, quota, limits, network policies."""

from typing import Any

from app.kube.manifests import labels as lbl
from app.kube.manifests.names import cluster_queue_name, host_namespace_name, release_name
from app.kube.manifests.specs import ClusterSpec, ManifestPolicy
from app.kube.manifests.units import cpu_quantity, memory_quantity, mig_resource

Manifest = dict[str, Any]


def _meta(spec: ClusterSpec, name: str) -> Manifest:
    return {
        "name": name,
        "namespace": host_namespace_name(spec.tenant, spec.name),
        "labels": lbl.cluster_labels(spec.tenant, spec.name),
    }


def namespace(spec: ClusterSpec, policy: ManifestPolicy) -> Manifest:
    del policy  # part of the uniform builder signature; nothing here is operator-tunable yet
    labels = {
        **lbl.cluster_labels(spec.tenant, spec.name),
        lbl.PLACEMENT: spec.placement,
        lbl.QUEUE: cluster_queue_name(spec.tenant, spec.name),
        f"{lbl.PSA_PREFIX}enforce": spec.pod_security,
        f"{lbl.PSA_PREFIX}enforce-version": "latest",
        # Always warn and audit at restricted so a baseline namespace still shows what would break.
        f"{lbl.PSA_PREFIX}warn": "restricted",
        f"{lbl.PSA_PREFIX}warn-version": "latest",
        f"{lbl.PSA_PREFIX}audit": "restricted",
        f"{lbl.PSA_PREFIX}audit-version": "latest",
    }
    level = hardening_level(spec.pod_security, spec.user_namespaces)
    if level is not None:
        labels[lbl.HARDENING] = level
    labels.update(unit_labels(spec))
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": host_namespace_name(spec.tenant, spec.name), "labels": labels},
    }


def unit_labels(spec: ClusterSpec) -> dict[str, str]:
    """What the webhook and the tenancy guard read of a cluster of MIG slices or a GPU share;
    nothing for whole GPUs (their namespaces keep the labels they always had)."""
    if spec.gpu_unit == "gpu":
        return {}
    labels = {lbl.GPU_UNIT: spec.gpu_unit, lbl.GPU_CLASS: spec.gpu_class or ""}
    if spec.gpu_unit == "mig":
        return {**labels, lbl.MIG_PROFILE: spec.mig_profile, lbl.MIG_SLICES: str(spec.amount)}
    return {**labels, lbl.GPU_SHARE: str(spec.amount)}


def hardening_level(pod_security: str, user_namespaces: bool) -> str | None:
    """What the admission webhook must do to the namespace's synced pods (None: nothing)."""
    if user_namespaces:
        return lbl.HARDENING_USER_NAMESPACES
    if pod_security == "baseline":
        # Restricted refuses pods without a seccomp profile; baseline would let them run
        # Unconfined, so the webhook gives them RuntimeDefault instead.
        return lbl.HARDENING_SECCOMP
    return None


def quota_lines(spec: ClusterSpec) -> dict[str, str]:
    """The hard limits shared by the host ResourceQuota and the chart's own quota.

    GPUs are capped at the cluster's burst ceiling, not its guarantee: KAI keeps the guarantee
    and reclaims the burst. Without a ceiling (unlimited burst) the quota has no GPU line.
    A cluster of MIG slices is capped at its slices of its one profile (no burst) and holds no
    whole GPU; a share holds no whole GPU either, and asks for no extended resource at all (the
    gpu-fraction annotation), so its KAI queue's limit is its cap.
    """
    memory = memory_quantity(spec.memory_mib)
    slices = {} if spec.gpu_unit != "mig" else _lines(mig_resource(spec.mig_profile), spec.held)
    return {
        **_gpu_lines(spec.gpu_ceiling),
        **slices,
        "requests.cpu": cpu_quantity(spec.cpu_millicores),
        "requests.memory": memory,
        # No memory overcommit on nodes shared by tenants; CPU limits stay free (only throttling).
        "limits.memory": memory,
        "services.nodeports": "0",
        "services.loadbalancers": "0",
    }


def _gpu_lines(ceiling: int | None) -> dict[str, str]:
    if ceiling is None:
        return {}
    return _lines(lbl.GPU_RESOURCE, ceiling)


def _lines(resource: str, cap: int) -> dict[str, str]:
    # Extended resources cannot be overcommitted (limit == request), so quota admission
    # enforces the requests.* line; the limits.* line states the same cap for readers.
    return {f"requests.{resource}": str(cap), f"limits.{resource}": str(cap)}


def resource_quota(spec: ClusterSpec) -> Manifest:
    hard = {**quota_lines(spec), "pods": str(spec.pods)}
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta(spec, "tenant-quota"),
        "spec": {"hard": dict(sorted(hard.items()))},
    }


def container_limits(policy: ManifestPolicy) -> dict[str, dict[str, str]]:
    d = policy.container_defaults
    return {
        "default": {"cpu": d.cpu_limit, "memory": d.memory_limit},
        "defaultRequest": {"cpu": d.cpu_request, "memory": d.memory_request},
    }


def limit_range(spec: ClusterSpec, policy: ManifestPolicy) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": _meta(spec, "tenant-defaults"),
        "spec": {"limits": [{"type": "Container", **container_limits(policy)}]},
    }


def network_policy(spec: ClusterSpec) -> Manifest:
    """Deny ingress from other tenants; allow the namespace itself and the tenant's other clusters.

    Egress is left to the chart's own policy (policies.networkPolicy in the values), which allows
    DNS, the virtual control plane and public egress. Cross-tenant traffic is still blocked
    because every tenant namespace refuses ingress from foreign tenants on the receiving side.
    """
    same_tenant = {"namespaceSelector": {"matchLabels": {lbl.TENANT: spec.tenant}}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(spec, "tenant-isolation"),
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {}}, same_tenant]}],
        },
    }


def api_server_network_policy(spec: ClusterSpec, policy: ManifestPolicy) -> Manifest:
    """Let tenants reach their virtual API server from outside the tenant (ingress, load balancer).

    The API server authenticates every request, so its port is open to any source; the selector
    excludes pods synced from the virtual cluster, so a tenant pod cannot borrow these labels.
    """
    selector = {
        "matchLabels": {"app": "vcluster", "release": release_name(spec.name)},
        "matchExpressions": [{"key": lbl.VCLUSTER_SYNCED_MARKER, "operator": "DoesNotExist"}],
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(spec, "vcluster-api-server"),
        "spec": {
            "podSelector": selector,
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"protocol": "TCP", "port": policy.vcluster_api_port}]}],
        },
    }
