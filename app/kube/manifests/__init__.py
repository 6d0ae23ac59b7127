"""Pure manifest builders: frozen specs in, plain dicts out, ready for server-side apply.

No I/O and no Kubernetes client here; the same input always gives the same output.
"""

from typing import Any

from app.kube.manifests.admission import (
    hardening_guard_binding,
    hardening_guard_policy,
    queue_guard_binding,
    queue_guard_policy,
)
from app.kube.manifests.host import (
    api_server_network_policy,
    hardening_level,
    limit_range,
    namespace,
    network_policy,
    resource_quota,
)
from app.kube.manifests.labels import FIELD_MANAGER
from app.kube.manifests.names import (
    cluster_queue_name,
    host_namespace_name,
    kubeconfig_secret_name,
    release_name,
    tenant_queue_name,
)
from app.kube.manifests.nodes import node_tenant_patch
from app.kube.manifests.queues import cluster_queue, root_queue, tenant_queue
from app.kube.manifests.specs import (
    UNLIMITED_GPUS,
    ClusterSpec,
    ContainerDefaults,
    GpuGrant,
    InvalidSpec,
    ManifestPolicy,
    TenantSpec,
)
from app.kube.manifests.tenancy import tenancy_objects
from app.kube.manifests.vcluster import dump_yaml, vcluster_values, vcluster_values_yaml


def platform_objects(policy: ManifestPolicy) -> list[dict[str, Any]]:
    """Cluster-wide objects shared by all tenants: the KAI root queue, the queue guard, the
    hardening guard and the guards that keep each tenant off other tenants' nodes."""
    return [root_queue(policy), queue_guard_policy(), queue_guard_binding(),
            hardening_guard_policy(), hardening_guard_binding(), *tenancy_objects()]


def cluster_host_objects(
    cluster: ClusterSpec, tenant: TenantSpec, policy: ManifestPolicy
) -> list[dict[str, Any]]:
    """Everything one virtual cluster needs on the host before its Helm release, in apply order:
    its own objects, with the root and tenant queues its queue hangs from (those two are kept by
    kinds of their own: the cluster's reconcile writes only ``cluster_own_objects``)."""
    if cluster.tenant != tenant.slug:
        raise ValueError(f"cluster {cluster.name!r} does not belong to tenant {tenant.slug!r}")
    *before_queue, queue = cluster_own_objects(cluster, policy)
    return [*before_queue, root_queue(policy), tenant_queue(tenant, policy), queue]


def cluster_own_objects(cluster: ClusterSpec, policy: ManifestPolicy) -> list[dict[str, Any]]:
    """What belongs to one virtual cluster alone on its host, in apply order; its KAI queue
    last."""
    return [
        namespace(cluster, policy),
        resource_quota(cluster),
        limit_range(cluster, policy),
        network_policy(cluster),
        api_server_network_policy(cluster, policy),
        cluster_queue(cluster, policy),
    ]


__all__ = [
    "FIELD_MANAGER",
    "UNLIMITED_GPUS",
    "ClusterSpec",
    "ContainerDefaults",
    "GpuGrant",
    "InvalidSpec",
    "ManifestPolicy",
    "TenantSpec",
    "api_server_network_policy",
    "cluster_host_objects",
    "cluster_own_objects",
    "cluster_queue",
    "cluster_queue_name",
    "dump_yaml",
    "hardening_guard_binding",
    "hardening_guard_policy",
    "hardening_level",
    "host_namespace_name",
    "kubeconfig_secret_name",
    "limit_range",
    "namespace",
    "network_policy",
    "node_tenant_patch",
    "platform_objects",
    "queue_guard_binding",
    "queue_guard_policy",
    "release_name",
    "resource_quota",
    "root_queue",
    "tenant_queue",
    "tenant_queue_name",
    "vcluster_values",
    "vcluster_values_yaml",
]
