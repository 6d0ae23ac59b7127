"""Shapes of GPU classes on the API and in forms."""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from app.kit.validation import SingleLine

# A Kubernetes label value, which is what GPU Feature Discovery puts in nvidia.com/gpu.product.
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
MAX_MEMORY_MIB = 10 * 1024 * 1024
MAX_GPUS_PER_NODE = 64


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


class Capacity(BaseModel):
    """GPUs of one class: on live nodes, dedicated to tenants, guaranteed by quota, left."""

    total: int = Field(description="whole GPUs on live nodes, ready or not")
    assigned: int = Field(description="GPUs on nodes dedicated to tenants")
    guaranteed: int = Field(description="the sum of tenant quotas (dedicated nodes included)")
    shared_guaranteed: int = Field(
        default=0, description="quota not on dedicated nodes: guaranteed in the shared pool")
    free: int = Field(description="total - assigned - shared_guaranteed")
    not_ready: int = Field(default=0, description="GPUs of total on nodes that are not ready")
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
