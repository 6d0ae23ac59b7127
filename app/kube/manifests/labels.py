"""Label, annotation and name constants shared by every manifest builder."""

from typing import Final

FIELD_MANAGER: Final = "gpu-tenant-portal"

MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE: Final = "gpu-tenant-portal"
TENANT: Final = "gpu-tenant-portal/tenant"
CLUSTER: Final = "gpu-tenant-portal/cluster"
PLACEMENT: Final = "gpu-tenant-portal/placement"
# On every GPU node the worker keeps in the shared pool (not dedicated to a tenant); a
# shared-pool cluster's node sync selects on it, so it never sees another tenant's nodes.
POOL: Final = "gpu-tenant-portal/pool"
POOL_SHARED: Final = "shared"
# The node-sync selector of a private-nodes cluster (value: its queue name, tenant--cluster),
# which no host node carries: the virtual scheduler needs node sync on, and nothing of the host
# may be synced in (r57.md §3).
PRIVATE_NODES_OF: Final = "gpu-tenant-portal/private-nodes-of"
# The leaf queue a shared-pool namespace's pods must name; read by the admission guard.
QUEUE: Final = "gpu-tenant-portal/queue"

# On the namespace of a cluster of MIG slices or a GPU share (never on one of whole GPUs),
# read by the admission webhook and the tenancy guard: its unit (mig or share); for mig the
# profile and how many slices it holds; for share its hundredths of one GPU (the most one pod
# may ask for); and the GPU class (nvidia.com/gpu.product) the refusals name.
GPU_UNIT: Final = "gpu-tenant-portal/gpu-unit"
MIG_PROFILE: Final = "gpu-tenant-portal/mig-profile"
MIG_SLICES: Final = "gpu-tenant-portal/mig-slices"
GPU_SHARE: Final = "gpu-tenant-portal/gpu-share"
GPU_CLASS: Final = "gpu-tenant-portal/gpu-class"

# KAI's pod annotations for a share of one GPU (KAI v0.12 common/constants).
GPU_FRACTION: Final = "gpu-fraction"
GPU_MEMORY: Final = "gpu-memory"
GPU_FRACTION_DEVICES: Final = "gpu-fraction-num-devices"
GPU_FRACTION_CONTAINER: Final = "gpu-fraction-container-name"
SHARED_GPU_CONFIGMAP: Final = "runai/shared-gpu-configmap"

# On namespaces whose synced pods the admission webhook hardens (its namespace selector):
# "seccomp" gives pods the RuntimeDefault profile (Pod Security baseline does not require one);
# "user-namespaces" also sets hostUsers: false.
HARDENING: Final = "gpu-tenant-portal/hardening"
HARDENING_SECCOMP: Final = "seccomp"
HARDENING_USER_NAMESPACES: Final = "user-namespaces"
HARDENING_LEVELS: Final = (HARDENING_SECCOMP, HARDENING_USER_NAMESPACES)

GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_PRODUCT: Final = "nvidia.com/gpu.product"
HOSTNAME: Final = "kubernetes.io/hostname"

KAI_SCHEDULER_NAME: Final = "kai-scheduler"
KAI_QUEUE_LABEL: Final = "kai.scheduler/queue"
KAI_API_VERSION: Final = "scheduling.run.ai/v2"

# On every object the portal keeps for one bare-metal machine (its BareMetalHost, Secrets and
# bootstrap tokens), so they can be found and removed by machine.
MACHINE: Final = "gpu-tenant-portal/machine"

# Set by the vCluster syncer on every object it writes to the host namespace.
VCLUSTER_SYNCED_MARKER: Final = "vcluster.loft.sh/managed-by"

PSA_PREFIX: Final = "pod-security.kubernetes.io/"


def managed(**extra: str) -> dict[str, str]:
    """The managed-by label plus the given labels, in a stable order."""
    return {MANAGED_BY: MANAGED_BY_VALUE, **dict(sorted(extra.items()))}


def tenant_labels(tenant: str) -> dict[str, str]:
    return {MANAGED_BY: MANAGED_BY_VALUE, TENANT: tenant}


def cluster_labels(tenant: str, cluster: str) -> dict[str, str]:
    return {MANAGED_BY: MANAGED_BY_VALUE, TENANT: tenant, CLUSTER: cluster}
