"""Shapes of GPU classes on the API and in forms."""

from __future__ import annotations

import re
from datetime import datetime
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from app.kit.validation import SingleLine

# A Kubernetes label value, which is what GPU Feature Discovery puts in nvidia.com/gpu.product.
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
MAX_MEMORY_MIB = 10 * 1024 * 1024
MAX_GPUS_PER_NODE = 64


class NamedClass(NamedTuple):
    """A class as a request or a message names it."""

    id: int
    product: str
    display_name: str


class GpuClassCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    product: SingleLine = Field(min_length=1, max_length=63,
                                examples=["NVIDIA-H100-80GB-HBM3"])
    display_name: SingleLine = Field(min_length=1, max_length=100)
    memory_mib: StrictInt = Field(default=0, ge=0, le=MAX_MEMORY_MIB)
    gpus_per_node: StrictInt | None = Field(default=None, ge=1, le=MAX_GPUS_PER_NODE)

    @field_validator("product")
    @classmethod
    def _label_value(cls, value: str) -> str:
        if not _LABEL_VALUE.match(value):
            raise ValueError(
                "must be the nvidia.com/gpu.product label value: letters, digits, '-', '_' "
                "and '.', starting and ending with a letter or digit"
            )
        return value


SHARE_STEPS_ALLOWED = tuple(step for step in range(1, 101) if 100 % step == 0)


class GpuClassUpdate(BaseModel):
    """What a platform admin changes of a class: its display name, and whether (and in what
    steps, hundredths of one GPU) its GPUs are shared through KAI GPU sharing. A field left out
    stays as it is; ``share_step: null`` stops new shares of the class."""

    model_config = ConfigDict(extra="forbid")

    display_name: SingleLine | None = Field(default=None, min_length=1, max_length=100)
    share_step: StrictInt | None = Field(
        default=None, ge=1, le=100, examples=[25],
        description="a share of one GPU of this class is asked for in steps of this many "
                    "hundredths (25: 0.25, 0.5, 0.75, 1); a divisor of 100. null: the class "
                    "is not shared. Shares of different tenants may land on one GPU, with no "
                    "memory isolation between them")

    @field_validator("share_step")
    @classmethod
    def _divides_a_gpu(cls, value: int | None) -> int | None:
        if value is not None and 100 % value:
            allowed = ", ".join(str(step) for step in SHARE_STEPS_ALLOWED)
            raise ValueError(f"must divide one GPU (100 hundredths) evenly: one of {allowed}")
        return value

    @model_validator(mode="after")
    def _changes_something(self) -> GpuClassUpdate:
        if not self.model_fields_set:
            raise ValueError("give display_name, share_step or both")
        if "display_name" in self.model_fields_set and self.display_name is None:
            raise ValueError("display_name cannot be null")
        return self


class MigProfileFigures(BaseModel):
    """MIG slices of one profile KAI Scheduler can count (``app.kit.gpu_units``)."""

    profile: str = Field(examples=["1g.10gb"])
    total: int = Field(description="slices on live nodes in a MIG mode, ready or not")
    ready: int = Field(description="of total, on nodes that are Ready")
    guaranteed: int = Field(
        description="approved to tenants (per host: held by the shared-pool clusters placed "
                    "there)")
    free: int = Field(description="ready - guaranteed: negative when a MIG reconfiguration "
                                  "took slices tenants were approved")
    in_use: float = Field(description="slices bound to pods, as the worker last read the hosts")
    kai_gpus_each: int = Field(
        description="what KAI Scheduler counts one slice as in a queue's gpu figures: the "
                    "profile's GPU instances (1g.10gb: 1, 3g.40gb: 3)")


class SharedFigures(BaseModel):
    """Shares of one GPU (KAI GPU sharing) of a class, in GPUs written as decimals."""

    step: int | None = Field(
        description="a share is asked for in steps of this many hundredths of a GPU (25: "
                    "0.25); null: the class is not shared")
    guaranteed: str = Field(description="shares approved to tenants, in GPUs", examples=["0.75"])
    in_use: str = Field(description="shares bound to pods, in GPUs", examples=["0.5"])
    free_hundredths: int = Field(
        description="hundredths of a GPU new shares may still take: the whole free GPUs, and "
                    "what the shares guaranteed leave of the last GPU they take; what share "
                    "approvals are checked against")


class CapacityFigures(BaseModel):
    """GPUs of one class, over the fleet, a region or a host, each figure as defined once in
    ``app.gpu_classes.capacity`` (and docs/operator.md, "Capacity figures")."""

    total: int = Field(description="whole GPUs on live nodes, ready or not: ready + not_ready")
    ready: int = Field(description="of total, on nodes that are Ready")
    not_ready: int = Field(description="of total, on nodes that are not Ready")
    dedicated: int = Field(description="of total, on nodes dedicated to tenants (ready or not)")
    guaranteed: int = Field(
        description="promised to tenants: dedicated + shared_guaranteed + "
                    "shared_fraction_gpus (per class and region the approved quota, while no "
                    "tenant is over it)")
    shared_guaranteed: int = Field(
        description="guaranteed in the shared pool: per class and region each tenant's "
                    "approved quota less its dedicated GPUs (or what its shared-pool clusters "
                    "hold, if more); per host the GPUs of the shared-pool clusters placed there")
    shared_fraction_gpus: int = Field(
        default=0,
        description="whole GPUs that shares of one GPU take out of the shared pool: the "
                    "shares guaranteed (per region; per host those of the clusters placed "
                    "there), rounded up to whole GPUs")
    free: int = Field(
        description="ready GPUs of the shared pool nobody is guaranteed: ready - ready "
                    "dedicated - shared_guaranteed - shared_fraction_gpus; what approvals are "
                    "checked against; negative when overcommitted")
    in_use: float = Field(
        description="GPUs bound to pods now (fractions included, burst included), as the "
                    "worker last read the hosts")
    borrowed: float = Field(
        description="of in_use, the burst: what KAI allocated to the leaf queues beyond their "
                    "quotas")
    lent_from_idle_guarantees: float = Field(
        description="of borrowed, what the free GPUs cannot cover, per host: max(0, borrowed "
                    "- max(free, 0)), summed over hosts. KAI lent these from guarantees their "
                    "owners leave idle and reclaims them when the owners need them")
    mig_profiles: list[MigProfileFigures] = Field(
        default_factory=list, description="MIG slices per profile KAI can count; not in total")
    shared: SharedFigures | None = Field(
        default=None, description="shares of one GPU: null when the class is not shared and "
                                  "no share is approved or in use")


class Capacity(CapacityFigures):
    """A GPU class's figures over the fleet or in one region, with its MIG slices."""

    assigned: int = Field(deprecated=True, description="the same as dedicated")
    mig_resources: dict[str, int] = Field(
        default_factory=dict,
        description="MIG slices (nvidia.com/mig-*) on nodes in MIG mixed mode; not in total")


class GpuClassOut(BaseModel):
    id: int
    product: str
    display_name: str
    memory_mib: int
    gpus_per_node: int | None
    declared_by_admin: bool
    created_at: datetime
    share_step: int | None = Field(
        default=None, description="shares of one GPU are offered in steps of this many "
                                  "hundredths; null: the class is not shared")
    # Only platform admins see the fleet's figures.
    capacity: Capacity | None = None
