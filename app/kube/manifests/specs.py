"""Inputs of the manifest builders: small frozen values, decoupled from the ORM.

Every string that a tenant can influence is validated here, so that builders only ever place
known-good values at fixed keys (nothing tenant-supplied becomes a key or a YAML fragment).
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final, Literal
from urllib.parse import urlsplit

from app.kube.manifests.names import SEPARATOR, is_dns_label
from app.kube.manifests.units import GPU_UNITS, SHARE_STEPS, GpuUnit, is_mig_profile, kai_gpus

Placement = Literal["shared-pool", "dedicated-nodes", "private-nodes"]
PodSecurityLevel = Literal["restricted", "baseline"]
# Which vCluster build the operator runs: the open-source one or Pro (licensed features).
VClusterEdition = Literal["oss", "pro"]

TENANT_SLUG_MAX: Final = 30
UNLIMITED_GPUS: Final = -1
_K8S_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)$")
# A Kubernetes label value, which is what GPU Feature Discovery's product label is.
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_PLACEMENTS: Final = ("shared-pool", "dedicated-nodes", "private-nodes")
_POD_SECURITY: Final = ("restricted", "baseline")
_EDITIONS: Final = ("oss", "pro")


class InvalidSpec(ValueError):
    """A spec the builders refuse (a tenant's or operator's input): the tenant is told. Any
    other error out of a builder is a bug."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise InvalidSpec(message)


def _require_slug(value: str, what: str, max_len: int = 63) -> None:
    _require(
        is_dns_label(value) and len(value) <= max_len, f"{what} is not a DNS-1123 label: {value!r}"
    )
    _require(SEPARATOR not in value, f"{what} must not contain {SEPARATOR!r}: {value!r}")


def _require_non_negative(**values: int) -> None:
    for name, value in values.items():
        _require(value >= 0, f"{name} must be >= 0, got {value}")


def _require_unit(unit: str, mig_profile: str) -> None:
    _require(unit in GPU_UNITS, f"unknown GPU unit {unit!r}")
    if unit == "mig":
        _require(is_mig_profile(mig_profile),
                 f"not a MIG profile KAI can count (<1-7>g.<memory>gb): {mig_profile!r}")
    else:
        _require(mig_profile == "", "only MIG slices have a MIG profile")


@dataclass(frozen=True)
class GpuGrant:
    """A guarantee of one class in MIG slices (``amount`` slices of ``mig_profile``) or in a
    share (``amount`` hundredths of one GPU); whole GPUs stay in ``TenantSpec.gpu_quota``."""

    gpu_class: str
    unit: GpuUnit
    mig_profile: str
    amount: int

    def __post_init__(self) -> None:
        _require(_LABEL_VALUE.fullmatch(self.gpu_class) is not None, "invalid GPU class")
        _require(self.unit != "gpu", "whole GPUs are a tenant's gpu_quota")
        _require_unit(self.unit, self.mig_profile)
        _require_non_negative(amount=self.amount)

    @property
    def kai_gpus(self) -> Decimal:
        return kai_gpus(self.unit, self.amount, self.mig_profile)


@dataclass(frozen=True)
class TenantSpec:
    slug: str
    display_name: str
    # Approved GPUs per GPU class (the nvidia.com/gpu.product label value).
    gpu_quota: dict[str, int]
    cpu_millicores: int
    memory_mb: int
    # GPUs of its clusters asleep on this host: their guarantee is given back to the pool.
    asleep_gpus: int = 0
    # GPUs the tenant may borrow beyond its guarantee while others leave theirs idle (KAI
    # reclaims them when their owners come back): 0 none, None no ceiling but the pool.
    burst_gpus: int | None = 0
    # The tenant's share of idle GPUs against other bursting tenants (KAI's overQuotaWeight).
    over_quota_weight: int = 1
    # How long a pod of the tenant runs before KAI may reclaim or preempt it; None: at once.
    reclaim_min_runtime_s: int | None = None
    preempt_min_runtime_s: int | None = None
    # Its guarantees in MIG slices and GPU shares, which KAI's queues count by units.kai_gpus,
    # and KAI's count of those its clusters asleep on this host hold (given back too).
    gpu_grants: tuple[GpuGrant, ...] = ()
    asleep_grants: Decimal = Decimal(0)

    def __post_init__(self) -> None:
        _require_slug(self.slug, "tenant slug", TENANT_SLUG_MAX)
        _require(all(_LABEL_VALUE.fullmatch(c) for c in self.gpu_quota), "invalid GPU class")
        _require_non_negative(cpu_millicores=self.cpu_millicores, memory_mb=self.memory_mb,
                              over_quota_weight=self.over_quota_weight)
        _require(all(n >= 0 for n in self.gpu_quota.values()), "GPU quota must be >= 0")
        _require(self.burst_gpus is None or self.burst_gpus >= 0, "burst_gpus must be >= 0")
        for runtime in (self.reclaim_min_runtime_s, self.preempt_min_runtime_s):
            _require(runtime is None or runtime >= 0, "a minimum runtime must be >= 0")

    @property
    def total_gpus(self) -> int:
        """Its whole GPUs, every class together."""
        return sum(self.gpu_quota.values())

    @property
    def whole_guaranteed(self) -> int:
        """Its whole GPUs on the host, less those its sleeping clusters gave back."""
        return max(0, self.total_gpus - self.asleep_gpus)

    @property
    def guaranteed_gpus(self) -> Decimal:
        """Its quota on the host in KAI's count (whole GPUs, slices by their g-count, shares),
        less what its sleeping clusters gave back."""
        grants = sum((g.kai_gpus for g in self.gpu_grants), Decimal(0))
        return self.whole_guaranteed + max(Decimal(0), grants - self.asleep_grants)

    @property
    def gpu_ceiling(self) -> Decimal | None:
        """The most GPUs (KAI's count) the tenant may hold at once: its guarantee, slices and
        shares included, with the burst on top, so that slices never eat the burst; None: no
        ceiling."""
        return None if self.burst_gpus is None else self.guaranteed_gpus + self.burst_gpus

    @property
    def whole_gpu_ceiling(self) -> int | None:
        """The most whole GPUs it may hold at once: its own with the burst on top. Idle slices
        never become whole GPUs to borrow (KAI weighs a 1g.10gb slice as a whole GPU)."""
        return None if self.burst_gpus is None else self.whole_guaranteed + self.burst_gpus


@dataclass(frozen=True)
class ClusterSpec:
    tenant: str
    name: str
    kubernetes_version: str
    placement: Placement
    gpu_class: str | None
    gpus: int
    cpu_millicores: int
    memory_mib: int
    endpoint: str
    pods: int = 200
    pod_security: PodSecurityLevel = "restricted"
    # Pods synced into the namespace run in their own user namespace (hostUsers: false), set by
    # the portal's admission webhook; the host must support it (checked by template validation).
    user_namespaces: bool = False
    # The most GPUs the cluster may hold with burst (shared pool only): None its own GPUs (no
    # burst), UNLIMITED_GPUS no ceiling but KAI's; never below ``gpus``.
    gpu_limit: int | None = None
    # Asleep: no GPU for its pods (it runs none) and no guarantee held in the pool.
    asleep: bool = False
    # What it holds: whole GPUs (``gpus``), slices of one MIG profile or a share of one GPU
    # (``amount`` slices, or hundredths: 50 is half a GPU), the latter two only in the shared
    # pool, with ``gpus`` 0 and no burst. None: ``gpus`` (whole GPUs).
    gpu_unit: GpuUnit = "gpu"
    mig_profile: str = ""
    amount: int | None = None

    def __post_init__(self) -> None:
        if self.amount is None and self.gpu_unit == "gpu":
            object.__setattr__(self, "amount", self.gpus)
        _require_slug(self.tenant, "tenant slug", TENANT_SLUG_MAX)
        _require_slug(self.name, "cluster name")
        _require(self.placement in _PLACEMENTS, f"unknown placement {self.placement!r}")
        _require(self.pod_security in _POD_SECURITY, f"unknown level {self.pod_security!r}")
        _require(
            _K8S_VERSION.fullmatch(self.kubernetes_version) is not None,
            f"kubernetes_version must be MAJOR.MINOR.PATCH: {self.kubernetes_version!r}",
        )
        _require(
            self.gpu_class is None or _LABEL_VALUE.fullmatch(self.gpu_class) is not None,
            f"invalid GPU class {self.gpu_class!r}",
        )
        _require(self.gpus == 0 or self.gpu_class is not None, "GPUs need a GPU class")
        _require_non_negative(
            gpus=self.gpus,
            cpu_millicores=self.cpu_millicores,
            memory_mib=self.memory_mib,
            pods=self.pods,
        )
        _require(_is_https_url(self.endpoint), f"endpoint must be an https URL: {self.endpoint!r}")
        _require(self.gpu_limit is None or self.gpu_limit == UNLIMITED_GPUS
                 or self.gpu_limit >= self.gpus, "gpu_limit must be -1 or >= gpus")
        _require(self.gpu_limit is None or self.placement == "shared-pool",
                 "only a shared-pool cluster bursts")
        self._check_unit()

    def _check_unit(self) -> None:
        _require_unit(self.gpu_unit, self.mig_profile)
        _require(self.amount is not None and self.amount >= 0, "amount must be >= 0")
        if self.gpu_unit == "gpu":
            _require(self.amount == self.gpus, "a cluster of whole GPUs holds amount == gpus")
            return
        _require(self.gpus == 0, "a cluster of MIG slices or a GPU share holds no whole GPUs")
        _require(self.gpu_class is not None, "MIG slices and GPU shares need a GPU class")
        _require(self.placement == "shared-pool", "MIG slices and GPU shares are shared-pool only")
        _require(self.gpu_limit is None, "MIG slices and GPU shares do not burst")
        _require(self.gpu_unit != "share" or (self.amount or 0) <= SHARE_STEPS,
                 "a share is at most one GPU (100 hundredths)")

    @property
    def held(self) -> int:
        """What it holds of the host in its own unit (0 asleep or on machines of its own)."""
        return 0 if self.holds_no_host_gpus else (self.amount or 0)

    @property
    def kai_guarantee(self) -> Decimal:
        """Its guarantee in KAI's count (units.kai_gpus)."""
        return kai_gpus(self.gpu_unit, self.held, self.mig_profile)

    @property
    def kai_ceiling(self) -> Decimal | None:
        """The most GPUs (KAI's count) its pods may hold at once; None: no ceiling but KAI's.
        Slices and shares never burst: their ceiling is their guarantee."""
        if self.gpu_unit != "gpu":
            return self.kai_guarantee
        ceiling = self.gpu_ceiling
        return None if ceiling is None else Decimal(ceiling)

    @property
    def holds_no_host_gpus(self) -> bool:
        """Asleep, or its GPUs are machines of its own (private nodes): none of the host's."""
        return self.asleep or self.placement == "private-nodes"

    @property
    def guaranteed_gpus(self) -> int:
        return 0 if self.holds_no_host_gpus else self.gpus

    @property
    def gpu_ceiling(self) -> int | None:
        """The most of the host's GPUs the cluster's pods may hold at once; None: no ceiling but
        KAI's."""
        if self.holds_no_host_gpus:
            return 0
        if self.gpu_limit is None:
            return self.gpus
        return None if self.gpu_limit == UNLIMITED_GPUS else self.gpu_limit

    @property
    def image_tag(self) -> str:
        return "v" + self.kubernetes_version.removeprefix("v")


def _is_https_url(value: str) -> bool:
    if not value.isprintable() or " " in value:  # every other space is unprintable
        return False
    parts = urlsplit(value)
    return parts.scheme == "https" and bool(parts.hostname) and not parts.query


@dataclass(frozen=True)
class ContainerDefaults:
    """LimitRange defaults for containers that state no resources (Kubernetes quantities)."""

    cpu_limit: str = "1"
    memory_limit: str = "2Gi"
    cpu_request: str = "100m"
    memory_request: str = "256Mi"


@dataclass(frozen=True)
class ManifestPolicy:
    """Operator settings that shape the manifests; defaults are the safe choice."""

    kai_root_queue: str = "tenants"
    over_quota_weight: int = 1
    tenant_queue_priority: int = 100
    container_defaults: ContainerDefaults = field(default_factory=ContainerDefaults)
    # Port of the vCluster API server pod that tenants reach (through an ingress or LB).
    vcluster_api_port: int = 8443
    # "oss": the values never use a Pro-only key (see vcluster.PRO_ONLY_PATHS).
    vcluster_edition: VClusterEdition = "oss"
    # Where the control planes run (e.g. CPU nodes): never on a GPU node the tenants pay for.
    control_plane_node_selector: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require_slug(self.kai_root_queue, "kai_root_queue")
        _require(self.vcluster_edition in _EDITIONS, f"unknown edition {self.vcluster_edition!r}")
        _require(self.over_quota_weight >= 0, "over_quota_weight must be >= 0")
