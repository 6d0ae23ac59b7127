"""Usage report filters and rows, shared by the JSON, CSV and HTML surfaces."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

GroupBy = Literal["day", "month"]


UtilisedGpuHours = Annotated[float | None, Field(
    description="of used_gpu_hours, those computing: each GPU-hour in use weighted by the "
                "GPU's utilisation (DCGM_FI_DEV_GPU_UTIL / 100) read from the operator's "
                "Prometheus at each sample, over the part utilisation_coverage says was "
                "known; null (unknown) when it never was, 0 when no GPU was in use")]
UtilisationCoverage = Annotated[float | None, Field(
    description="the share (0 to 1) of used_gpu_hours whose utilisation was known, so "
                "utilised_gpu_hours counts; null when no GPU was in use")]


ReportUnit = Annotated[Literal["gpu", "shared", "mig"], Field(
    description="what the row's grant is counted in: whole GPUs (gpu), shares of one GPU "
                "scheduled by KAI's GPU sharing (shared: its *_gpu_hours are the fractions "
                "held or bound, e.g. 0.5 GPU for an hour is 0.5), or MIG slices of mig_profile "
                "(mig: its *_gpu_hours are 0 and its hours are the *_slice_hours)")]
MigProfile = Annotated[str, Field(description="the MIG profile of a mig row (1g.10gb); "
                                              "empty on every other")]


def _slice_hours(what: str) -> Any:
    return Field(default=0.0, description=f"slice-hours {what} (slices times hours) on a "
                                          "mig row; 0 on every other")


class UsageFilters(BaseModel):
    start: datetime  # the query's ``from``, a Python keyword
    end: datetime  # ``to``
    tenant: str | None = None
    group_by: GroupBy = "day"


class UsageRow(BaseModel):
    """One tenant's GPU-hours of one class in one period (UTC), each kind separately."""

    tenant: str
    gpu_class: str
    period: str = Field(description="YYYY-MM-DD for days, YYYY-MM for months (UTC)")
    period_start: datetime
    period_end: datetime
    approved_gpu_hours: float = Field(description="GPU-hours of approved quota")
    allocated_gpu_hours: float = Field(description="GPU-hours given to virtual clusters")
    dedicated_gpu_hours: float = Field(description="GPU-hours of dedicated nodes assigned")
    shared_pool_gpu_hours: float = Field(
        description="of allocated_gpu_hours, those of shared-pool clusters (the rest ran on "
                    "dedicated nodes): shared_pool_gpu_hours + dedicated_gpu_hours is what the "
                    "approved quota bounds (docs/operator.md, Quota accounting)")
    used_gpu_hours: float = Field(
        description="GPU-hours bound to pods (KAI's allocation to the queues, pods on dedicated "
                    "nodes), sampled each worker resync; guaranteed_gpu_hours + "
                    "burst_gpu_hours")
    guaranteed_gpu_hours: float = Field(
        description="of used_gpu_hours, those within the guarantee: KAI's allocation to each "
                    "cluster's leaf queue up to the queue's quota (the cluster's approved GPUs), "
                    "and all the GPU-hours on dedicated nodes")
    burst_gpu_hours: float = Field(
        description="of used_gpu_hours, those beyond the guarantee: KAI's allocation to a leaf "
                    "queue above its quota, lent from idle GPUs of the pool and taken back when "
                    "another tenant needs its guarantee; an operator may charge them at their "
                    "own rate")
    allocated_gpu_seconds: int = Field(description="allocated, exact to the second")
    slept_gpu_hours: float = Field(
        description="GPU-hours of the shared-pool clusters' guarantees freed by sleep: from "
                    "the moment a cluster fell asleep on the host until it woke or was "
                    "deleted, its GPUs were the shared pool's again, free for other tenants. "
                    "Part of allocated_gpu_hours (the tenant still holds the cluster); "
                    "dedicated-nodes clusters free none")
    utilised_gpu_hours: UtilisedGpuHours = None
    utilisation_coverage: UtilisationCoverage = None
    unit: ReportUnit = "gpu"
    mig_profile: MigProfile = ""
    approved_slice_hours: float = _slice_hours("of approved quota")
    allocated_slice_hours: float = _slice_hours(
        "given to virtual clusters")
    used_slice_hours: float = _slice_hours(
        "bound to pods (KAI's allocation to the queues, sampled each worker resync)")


class UsageReport(BaseModel):
    start: datetime
    end: datetime
    group_by: GroupBy
    tenant: str | None
    rows: list[UsageRow]


class ClusterUsageRow(BaseModel):
    """One cluster's GPU-hours of its class in one period (UTC), guaranteed and burst."""

    tenant: str
    cluster: str
    gpu_class: str
    period: str = Field(description="YYYY-MM-DD for days, YYYY-MM for months (UTC)")
    period_start: datetime
    period_end: datetime
    allocated_gpu_hours: float = Field(description="GPU-hours of the cluster's approved GPUs")
    used_gpu_hours: float = Field(
        description="GPU-hours KAI allocated to the cluster's leaf queue, sampled each worker "
                    "resync; guaranteed_gpu_hours + burst_gpu_hours")
    guaranteed_gpu_hours: float = Field(description="of used_gpu_hours, within its quota")
    burst_gpu_hours: float = Field(
        description="of used_gpu_hours, beyond its quota: borrowed from idle GPUs, reclaimable")
    slept_gpu_hours: float = Field(
        description="GPU-hours of the cluster's guarantee freed by sleep: from the moment it "
                    "fell asleep on the host until it woke or was deleted, its GPUs were the "
                    "shared pool's again, free for other tenants. Part of allocated_gpu_hours "
                    "(the tenant still holds it); dedicated-nodes clusters free none")
    utilised_gpu_hours: UtilisedGpuHours = None
    utilisation_coverage: UtilisationCoverage = None
    unit: ReportUnit = "gpu"
    mig_profile: MigProfile = ""
    approved_slice_hours: float = _slice_hours(
        "of the cluster's approved slices (as allocated_slice_hours)")
    allocated_slice_hours: float = _slice_hours(
        "of the cluster's approved slices")
    used_slice_hours: float = _slice_hours(
        "KAI allocated to the cluster's leaf queue")


class ClusterUsageReport(BaseModel):
    start: datetime
    end: datetime
    group_by: GroupBy
    tenant: str | None
    rows: list[ClusterUsageRow]
