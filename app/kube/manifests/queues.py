"""KAI Scheduler queues (scheduling.run.ai/v2 Queue, cluster-scoped); see reference/kai-queue.yaml.

Units: gpu in devices, cpu in millicores, memory in MB (10^6 bytes). `limit` is always explicit
because an unset limit means "nothing beyond quota", which is easy to get wrong by omission.

GPU quota counts devices of every class together, because a KAI queue has no notion of GPU
class. Keeping a cluster's pods on the class it was granted is done by node selection in the
vCluster values (nvidia.com/gpu.product) and by the database invariants, not by the queue.
"""

import math
from typing import Any

from app.kube.manifests import labels as lbl
from app.kube.manifests.names import cluster_queue_name, tenant_queue_name
from app.kube.manifests.specs import ClusterSpec, ManifestPolicy, TenantSpec
from app.kube.manifests.units import mib_to_mb

Manifest = dict[str, Any]
UNLIMITED = -1


def _resource(quota: int, limit: int, weight: int) -> dict[str, int]:
    return {"quota": quota, "limit": limit, "overQuotaWeight": weight}


def _queue(name: str, labels: dict[str, str], spec: Manifest) -> Manifest:
    return {
        "apiVersion": lbl.KAI_API_VERSION,
        "kind": "Queue",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def root_queue(policy: ManifestPolicy) -> Manifest:
    unlimited = _resource(UNLIMITED, UNLIMITED, policy.over_quota_weight)
    resources = {"gpu": unlimited, "cpu": dict(unlimited), "memory": dict(unlimited)}
    return _queue(policy.kai_root_queue, lbl.managed(), {"resources": resources})


def tenant_gpu_limit(tenant: TenantSpec, policy: ManifestPolicy) -> int:
    if tenant.gpu_limit is not None:
        return tenant.gpu_limit
    if policy.tenant_gpu_limit_factor is None:
        return UNLIMITED
    return math.ceil(tenant.total_gpus * policy.tenant_gpu_limit_factor)


def tenant_queue(tenant: TenantSpec, policy: ManifestPolicy) -> Manifest:
    name = tenant_queue_name(tenant.slug)
    if name == policy.kai_root_queue:
        raise ValueError(f"tenant slug {tenant.slug!r} collides with the root queue")
    weight = policy.over_quota_weight
    spec = {
        "displayName": tenant.display_name,
        "parentQueue": policy.kai_root_queue,
        "priority": policy.tenant_queue_priority,
        "resources": {
            "gpu": _resource(tenant.total_gpus, tenant_gpu_limit(tenant, policy), weight),
            "cpu": _resource(tenant.cpu_millicores, UNLIMITED, weight),
            "memory": _resource(tenant.memory_mb, UNLIMITED, weight),
        },
    }
    return _queue(name, lbl.tenant_labels(tenant.slug), spec)


def cluster_queue(cluster: ClusterSpec, policy: ManifestPolicy) -> Manifest:
    """The leaf queue of one virtual cluster; the only kind of queue that accepts workloads.

    The GPU limit equals the quota: the namespace ResourceQuota caps the cluster at its GPUs
    anyway, so a higher queue limit could never be used.
    """
    weight = policy.over_quota_weight
    spec = {
        "parentQueue": tenant_queue_name(cluster.tenant),
        "resources": {
            "gpu": _resource(cluster.gpus, cluster.gpus, weight),
            "cpu": _resource(cluster.cpu_millicores, UNLIMITED, weight),
            "memory": _resource(mib_to_mb(cluster.memory_mib), UNLIMITED, weight),
        },
    }
    labels = lbl.cluster_labels(cluster.tenant, cluster.name)
    return _queue(cluster_queue_name(cluster.tenant, cluster.name), labels, spec)
