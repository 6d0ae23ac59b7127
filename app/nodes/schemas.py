"""Shapes of nodes, dedicated assignments and node suggestions on the API and in forms."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from app.kit.validation import SingleLine

MAX_SUGGESTED_GPUS = 100_000


class Condition(BaseModel):
    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: datetime | None = None  # noqa: N815 - the Kubernetes spelling
    observedGeneration: int | None = None  # noqa: N815


class NodeOut(BaseModel):
    name: str
    host_cluster: str
    gpu_class: str | None
    gpu_class_display_name: str | None
    gpus: int = Field(description="whole GPUs (allocatable nvidia.com/gpu)")
    mig_strategy: str
    mig_resources: dict[str, int]
    zone: str
    rack: str
    clique: str
    ready: bool
    taints: list[dict[str, Any]]
    tenant: str | None = Field(description="the tenant the node is dedicated to")
    assigned_at: datetime | None
    first_seen_at: datetime
    last_seen_at: datetime
    gone_at: datetime | None
    conditions: list[Condition] = Field(default_factory=list)


class AssignmentOut(BaseModel):
    tenant: str
    assigned_at: datetime
    assigned_by: str | None
    ended_at: datetime | None
    ended_by: str | None


class NodeDetail(NodeOut):
    assignments: list[AssignmentOut] = Field(description="newest first, ended ones included")


class AssignmentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: SingleLine = Field(min_length=1, max_length=30, examples=["acme"])


class SuggestionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: SingleLine = Field(min_length=1, max_length=30, examples=["acme"])
    gpu_class: SingleLine = Field(min_length=1, max_length=200,
                                  examples=["NVIDIA-H100-80GB-HBM3"])
    gpus: StrictInt = Field(ge=1, le=MAX_SUGGESTED_GPUS)


class SuggestedNode(BaseModel):
    name: str
    gpus: int
    zone: str
    rack: str
    clique: str


class SuggestionOut(BaseModel):
    tenant: str
    gpu_class: str
    gpus_requested: int
    gpus: int = Field(description="GPUs on the suggested nodes (whole nodes: may exceed the ask)")
    nodes: list[SuggestedNode]
    racks: list[str]
    cliques: list[str]
    quota_gpus: int = Field(description="the tenant's approved quota of the class")
    dedicated_gpus: int = Field(description="GPUs of the class already dedicated to the tenant")
    quota_left_gpus: int = Field(description="GPUs of the class the tenant's approved quota "
                                             "leaves for dedicated nodes (its dedicated nodes "
                                             "and shared-pool clusters hold the rest)")
    fits_quota: bool
    note: str = ""


class TenantNodeOut(BaseModel):
    """What a tenant sees of its own dedicated nodes."""

    name: str
    gpu_class: str | None
    gpu_class_name: str | None = Field(description="the class's display name, as pages show it")
    gpus: int
    ready: bool
