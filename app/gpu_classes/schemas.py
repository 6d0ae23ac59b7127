"""Shapes of GPU classes on the API and in forms."""

from __future__ import annotations

import re
from datetime import datetime
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

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


class GpuClassUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    display_name: SingleLine = Field(min_length=1, max_length=100)


class CapacityFigures(BaseModel):
    """GPUs of one class, over the fleet, a region or a host, each figure as defined once in
    ``app.gpu_classes.capacity`` (and docs/operator.md, "Capacity figures")."""

    total: int = Field(description="whole GPUs on live nodes, ready or not: ready + not_ready")
    ready: int = Field(description="of total, on nodes that are Ready")
    not_ready: int = Field(description="of total, on nodes that are not Ready")
    dedicated: int = Field(description="of total, on nodes dedicated to tenants (ready or not)")
    guaranteed: int = Field(
        description="promised to tenants: dedicated + shared_guaranteed (per class and region "
                    "the approved quota, while no tenant is over it)")
    shared_guaranteed: int = Field(
        description="guaranteed in the shared pool: per class and region each tenant's "
                    "approved quota less its dedicated GPUs (or what its shared-pool clusters "
                    "hold, if more); per host the GPUs of the shared-pool clusters placed there")
    free: int = Field(
        description="ready GPUs of the shared pool nobody is guaranteed: ready - ready "
                    "dedicated - shared_guaranteed; what approvals are checked against; "
                    "negative when overcommitted")
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
    # Only platform admins see the fleet's figures.
    capacity: Capacity | None = None
