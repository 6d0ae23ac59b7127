"""KAI Scheduler queues (scheduling.run.ai/v2 Queue, cluster-scoped); see reference/kai-queue.yaml.

Units: gpu in devices, cpu in millicores, memory in MB (10^6 bytes). `limit` is always explicit
because an unset limit means "nothing beyond quota", which is easy to get wrong by omission.

GPU quota counts devices of every class together, because a KAI queue has no notion of GPU
class. Keeping a cluster's pods on the class it was granted is done by node selection in the
vCluster values (nvidia.com/gpu.product) and by the database invariants, not by the queue.

Nor has it a notion of MIG profile or share: its ``gpu`` is one number, in which KAI v0.12
counts a slice of profile ``<g>g.<m>gb`` as ``g`` whole GPUs (the g-count: 3 x 1g.10gb is 3,
2 x 3g.40gb is 6, a 7g.80gb is 7) and a share as its fraction (0.5). The queues say the same
(units.kai_gpus), so that a leaf's quota covers exactly its slices or its share, and ``limit`` is
its quota (slices and shares never burst). Which profile a cluster may use is the host
ResourceQuota's to cap (nvidia.com/mig-<profile>), and what a pod may ask for the webhook's.
Numbers are JSON numbers, an int when whole; a server's copy is compared as exact Decimals
(quantities.drifted), so 0.07 written as a float never reads as a change.
"""

from decimal import Decimal
from typing import Any

from app.kube.manifests import labels as lbl
from app.kube.manifests.names import cluster_queue_name, tenant_queue_name
from app.kube.manifests.specs import (
    UNLIMITED_GPUS,
    ClusterSpec,
    InvalidSpec,
    ManifestPolicy,
    TenantSpec,
)
from app.kube.manifests.units import kai_number, mib_to_mb

Manifest = dict[str, Any]
UNLIMITED = UNLIMITED_GPUS


def _resource(quota: Decimal | int, limit: Decimal | int, weight: int) -> dict[str, int | float]:
    return {"quota": kai_number(Decimal(quota)), "limit": kai_number(Decimal(limit)),
            "overQuotaWeight": weight}


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


def cluster_gpu_limit(tenant: TenantSpec, gpus: int, placement: str,
                      gpu_unit: str = "gpu") -> int | None:
    """A shared-pool cluster of a bursting tenant may hold the whole GPUs its tenant may (KAI
    keeps the tenant's clusters together under the tenant's ceiling); without burst, on
    dedicated nodes, or of MIG slices or a share, its own GPUs (None)."""
    if placement != "shared-pool" or tenant.burst_gpus == 0 or gpu_unit != "gpu":
        return None
    ceiling = tenant.whole_gpu_ceiling
    return UNLIMITED if ceiling is None else max(ceiling, gpus)


def _min_runtimes(tenant: TenantSpec) -> dict[str, str]:
    """KAI reads these up from the leaf, so the tenant's queue speaks for its clusters."""
    runtimes = {"reclaimMinRuntime": tenant.reclaim_min_runtime_s,
                "preemptMinRuntime": tenant.preempt_min_runtime_s}
    return {key: f"{seconds}s" for key, seconds in runtimes.items() if seconds}


def tenant_queue(tenant: TenantSpec, policy: ManifestPolicy) -> Manifest:
    name = tenant_queue_name(tenant.slug)
    if name == policy.kai_root_queue:
        raise InvalidSpec(f"tenant slug {tenant.slug!r} collides with the root queue")
    weight = tenant.over_quota_weight
    ceiling = tenant.gpu_ceiling
    spec = {
        "displayName": tenant.display_name,
        "parentQueue": policy.kai_root_queue,
        "priority": policy.tenant_queue_priority,
        "resources": {
            "gpu": _resource(tenant.guaranteed_gpus, UNLIMITED if ceiling is None else ceiling,
                             weight),
            "cpu": _resource(tenant.cpu_millicores, UNLIMITED, weight),
            "memory": _resource(tenant.memory_mb, UNLIMITED, weight),
        },
        **_min_runtimes(tenant),
    }
    return _queue(name, lbl.tenant_labels(tenant.slug), spec)


def cluster_queue(cluster: ClusterSpec, policy: ManifestPolicy) -> Manifest:
    """The leaf queue of one virtual cluster; the only kind of queue that accepts workloads.

    Its quota is the cluster's guarantee; its limit the cluster's burst ceiling (the namespace
    ResourceQuota states the same, so neither can be used past the other), both in KAI's count.
    """
    weight = policy.over_quota_weight
    ceiling = cluster.kai_ceiling
    spec = {
        "parentQueue": tenant_queue_name(cluster.tenant),
        "resources": {
            "gpu": _resource(cluster.kai_guarantee, UNLIMITED if ceiling is None else ceiling,
                             weight),
            "cpu": _resource(cluster.cpu_millicores, UNLIMITED, weight),
            "memory": _resource(mib_to_mb(cluster.memory_mib), UNLIMITED, weight),
        },
    }
    labels = lbl.cluster_labels(cluster.tenant, cluster.name)
    return _queue(cluster_queue_name(cluster.tenant, cluster.name), labels, spec)
