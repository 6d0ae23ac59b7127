"""Shapes of quota, quota requests and decisions on the API and in forms."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
)

from app.database.core import utcnow
from app.gpu_classes.schemas import Capacity
from app.kit.gpu_units import MAX_PROFILE_LENGTH
from app.kit.validation import MAX_ROW_ID, MultiLine, SingleLine, UtcMoment

MAX_GPUS = 10_000
MAX_CPU_MILLICORES = 100_000_000
MAX_MEMORY_MIB = 1024 * 1024 * 1024
MAX_TEXT = 2000
MAX_QUOTA_LIFETIME = timedelta(days=5 * 366)

RequestState = Literal["pending", "approved", "rejected", "cancelled", "expired"]
REQUEST_STATES: tuple[str, ...] = ("pending", "approved", "rejected", "cancelled", "expired")

# A share of one GPU as written ("0.5"): hundredths at most; above 1 is refused in words
# (app.quotas.units), as is a share finer than the class's step.
GpuShare = Annotated[Decimal, Field(gt=0, max_digits=6, decimal_places=2)]
SLICES_DESCRIPTION = "MIG slices of mig_profile, 1 to 10,000"
SHARE_DESCRIPTION = ('a share of one GPU such as "0.5": more than 0, at most 1, in the '
                     "class's share steps")


class QuotaRequestCreate(BaseModel):
    """Asks for exactly one of: ``gpus`` whole GPUs; ``slices`` MIG slices of ``mig_profile``;
    or ``gpu_share``, a share of one GPU (app.kit.gpu_units)."""

    model_config = ConfigDict(extra="forbid")

    gpu_class_id: StrictInt = Field(ge=1, le=MAX_ROW_ID)
    gpus: StrictInt | None = Field(default=None, ge=1, le=MAX_GPUS,
                                   description="whole GPUs, 1 to 10,000")
    slices: StrictInt | None = Field(default=None, ge=1, le=MAX_GPUS,
                                     description=SLICES_DESCRIPTION)
    mig_profile: SingleLine | None = Field(default=None, max_length=MAX_PROFILE_LENGTH,
                                           examples=["1g.10gb"],
                                           description="the MIG profile of the slices")
    gpu_share: GpuShare | None = Field(default=None, examples=["0.5"],
                                       description=SHARE_DESCRIPTION)
    region: SingleLine = Field(
        default="", max_length=63,
        description="the region of host clusters the quota is for; empty: the only region "
                    "(refused once host clusters span several)")
    cpu_millicores: StrictInt = Field(default=0, ge=0, le=MAX_CPU_MILLICORES)
    memory_mib: StrictInt = Field(default=0, ge=0, le=MAX_MEMORY_MIB)
    reason: MultiLine = Field(min_length=1, max_length=MAX_TEXT)
    ends_at: UtcMoment | None = Field(
        default=None, description="when the quota expires; none for open-ended"
    )

    @field_validator("ends_at")
    @classmethod
    def _in_the_future(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        now = utcnow()
        if value <= now:
            raise ValueError("the end date must be in the future")
        if value > now + MAX_QUOTA_LIFETIME:
            raise ValueError("the end date must be within five years")
        return value


class ApproveIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpus: StrictInt | None = Field(
        default=None, ge=1, le=MAX_GPUS, description="1 to the requested count; default all"
    )
    slices: StrictInt | None = Field(
        default=None, ge=1, le=MAX_GPUS,
        description="of a request of slices: 1 to the requested count; default all")
    gpu_share: GpuShare | None = Field(
        default=None, description="of a request of a share: up to the requested share, in the "
                                  "class's steps; default all")
    note: MultiLine = Field(default="", max_length=MAX_TEXT)
    overcommit: StrictBool = Field(
        default=False, description="confirm guaranteeing more than the class's free GPUs"
    )


class RejectIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: MultiLine = Field(default="", max_length=MAX_TEXT)


class QuotaRequestOut(BaseModel):
    id: int
    tenant: str
    gpu_class_id: int
    gpu_class: str
    gpu_class_name: str = Field(description="the class's display name, as pages show it")
    region: str
    gpus: int
    cpu_millicores: int
    memory_mib: int
    reason: str
    ends_at: datetime | None
    state: str
    requested_by: str | None
    created_at: datetime
    approved_gpus: int | None
    overcommitted: bool
    decided_by: str | None
    decided_at: datetime | None
    decision_note: str
    unit: str = Field(default="gpu", description='"gpu" (whole GPUs), "mig" (MIG slices of '
                                                 'mig_profile) or "share" (a share of one GPU)')
    mig_profile: str = Field(default="", description="the MIG profile of a request of slices")
    amount: int = Field(default=0, description="asked, in the unit's steps: GPUs, slices or "
                                               "hundredths of a GPU")
    slices: int | None = Field(default=None, description="MIG slices asked; null for other units")
    gpu_share: str | None = Field(default=None, examples=["0.5"],
                                  description="the share of one GPU asked; null for other units")
    grant: str = Field(default="", examples=["3 \u00d7 1g.10gb of A100 SXM4 80GB"],
                       description="what is asked, in words")
    approved_slices: int | None = Field(default=None, description="MIG slices approved")
    approved_gpu_share: str | None = Field(default=None, description="the share approved")
    approved_grant: str | None = Field(default=None, description="what was approved, in words")
    warnings: list[str] = Field(
        default_factory=list,
        description="what the requester and the approver should know, such as a request for "
                    "more GPUs than the fleet has of the class; the request stands all the same")


class QueueItem(QuotaRequestOut):
    """A request with what the approver needs to decide it."""

    tenant_quota_gpus: int = Field(
        description="the tenant's approved GPUs of the class in the request's region (of a "
                    "request of slices or a share: its approved quota in that unit's steps, "
                    "slices or hundredths of a GPU)")
    tenant_allocated_gpus: int = Field(description="of those, given to its clusters")
    capacity: Capacity = Field(description="of the class in the request's region")


class TenantQuotaOut(BaseModel):
    gpu_class_id: int
    gpu_class: str
    display_name: str
    region: str
    approved_gpus: int
    allocated_gpus: int = Field(description="GPUs of the class given to the tenant's clusters")
    in_use_gpus: float | None = Field(
        description="GPUs bound to the tenant's pods now, as the worker last read the region's "
                    "hosts: KAI's allocation to its clusters' queues (fractions included) plus "
                    "the pods running on its dedicated nodes; null until a host was read")
    burst_in_use_gpus: float | None = Field(
        description="of in_use_gpus, the burst: GPUs KAI allocated to its clusters' queues "
                    "beyond their quotas from idle GPUs of the pool, which KAI takes back "
                    "(reclaims) when another tenant needs its guarantee; null until a host was "
                    "read")
    dedicated_gpus: int = Field(
        description="GPUs on nodes dedicated to the tenant: part of approved_gpus, not added")
    shared_pool_gpus: int = Field(
        description="what the shared pool guarantees the tenant (its KAI queue's quota): "
                    "approved_gpus less dedicated_gpus, or shared_pool_allocated_gpus if more")
    shared_pool_allocated_gpus: int = Field(
        description="of allocated_gpus, held by shared-pool clusters")
    dedicated_allocated_gpus: int = Field(
        description="of allocated_gpus, held by dedicated-nodes clusters (on dedicated_gpus)")
    private_nodes_allocated_gpus: int = Field(
        default=0, description="of allocated_gpus, held by private-nodes clusters (whole "
                               "machines joined to the cluster itself): part of approved_gpus")
    shared_pool_left_gpus: int = Field(
        description="what a new shared-pool or private-nodes cluster may take: approved_gpus "
                    "- dedicated_gpus - shared_pool_allocated_gpus - "
                    "private_nodes_allocated_gpus")
    dedicated_left_gpus: int = Field(
        description="what new dedicated-nodes clusters may take: dedicated_gpus - "
                    "dedicated_allocated_gpus (each host's nodes apart)")
    over_quota_gpus: int = Field(
        description="how far dedicated_gpus + shared_pool_allocated_gpus + "
                    "private_nodes_allocated_gpus pass approved_gpus "
                    "(after a quota expired, or from before the rule): nothing is taken away, "
                    "but nothing adds to it")
    cpu_millicores: int
    memory_mib: int
    unit: str = Field(default="gpu", description='"gpu", "mig" or "share": a quota of each unit '
                                                 "(and MIG profile) is a row of its own; the "
                                                 "*_gpus figures of a row of slices or a share "
                                                 "are 0 (whole GPUs)")
    mig_profile: str = Field(default="", description="the MIG profile of a quota of slices")
    amount: int = Field(default=0, description="approved, in the unit's steps: GPUs, slices or "
                                               "hundredths of a GPU")
    slices: int | None = Field(default=None, description="MIG slices approved")
    gpu_share: str | None = Field(default=None, description="the share of one GPU approved")
    grant: str = Field(default="", description="what is approved, in words")
    allocated_amount: int = Field(default=0, description="held by clusters, in the unit's steps")
    allocated: str = Field(default="", description="allocated_amount in words")
    left_amount: int = Field(default=0, description="what a new shared-pool cluster may take, "
                                                    "in the unit's steps")
    left: str = Field(default="", description="left_amount in words")


class ExpiredQuota(BaseModel):
    request_id: int
    tenant_id: int
    gpu_class_id: int
    region: str
    gpus: int
    over_quota_cluster_ids: list[int]
    over_quota_gpus: int = Field(
        default=0, description="how far the tenant's dedicated GPUs and shared-pool clusters "
                               "now pass its smaller quota (nothing is taken away)")


BurstTier = Literal["guaranteed", "burst", "priority-burst"]
MAX_RUNTIME_S = 7 * 86400


class BurstOut(BaseModel):
    """How the tenant may use idle GPUs beyond its guarantee (its approved quota)."""

    tier: str = Field(description='"guaranteed" (no burst), "burst" or "priority-burst"')
    burst_gpus: int = Field(
        description="GPUs the tenant may borrow beyond its guarantee while other tenants leave "
                    "theirs idle: 0 none, -1 no ceiling but the pool. Borrowed GPUs are "
                    "reclaimed by KAI Scheduler when their owners need their guarantee")
    over_quota_weight: int = Field(
        description="the tenant's share of idle GPUs against other borrowing tenants")
    reclaim_min_runtime_s: int | None = Field(
        description="seconds a pod runs on borrowed GPUs before they may be reclaimed; "
                    "null: at once")
    preempt_min_runtime_s: int | None = Field(
        description="seconds a pod runs before a higher-priority pod may preempt it; "
                    "null: at once")
    overrides: list[str] = Field(description="the fields a platform admin set apart from the tier")


class BurstIn(BaseModel):
    """A tier, and any of its values set apart from it (omitted or null: the tier's)."""

    model_config = ConfigDict(extra="forbid")

    tier: BurstTier
    burst_gpus: StrictInt | None = Field(
        default=None, ge=-1, le=MAX_GPUS * 10,
        description="GPUs the tenant may borrow beyond its guarantee, 0 to 100000; -1: no "
                    "ceiling but the pool (the pages ask for it in words: a \"No ceiling\" box)")
    over_quota_weight: StrictInt | None = Field(default=None, ge=0, le=1000)
    reclaim_min_runtime_s: StrictInt | None = Field(default=None, ge=0, le=MAX_RUNTIME_S)
    preempt_min_runtime_s: StrictInt | None = Field(default=None, ge=0, le=MAX_RUNTIME_S)

    def own_values(self) -> dict[str, int | None]:
        return self.model_dump(exclude={"tier"})
