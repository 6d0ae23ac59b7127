"""What the API answers about GPU utilisation; every figure is null with a reason when unknown."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class UtilisationOut(BaseModel):
    known: bool = Field(description="false when Prometheus is not configured, down or slow: "
                                    "every figure is then null, never zero")
    reason: str | None = Field(default=None, description="why the figures are unknown")
    utilisation_percent: float | None = Field(
        default=None, description="mean `DCGM_FI_DEV_GPU_UTIL` of the GPUs bound now (0-100); "
                                  "null when unknown or no GPU is bound")
    gpus_bound: int | None = Field(default=None, description="GPUs the exporter reports held")
    gpus_idle: int | None = Field(
        default=None, description="GPUs bound whose highest utilisation over the idle window "
                                  "is below the idle threshold")
    framebuffer_used_mib: float | None = Field(
        default=None, description="framebuffer used on those GPUs (`DCGM_FI_DEV_FB_USED`), MiB")
    idle_threshold_percent: float
    idle_window_minutes: int
    observed_at: datetime | None = None


class UtilisationPoint(BaseModel):
    at: datetime
    utilisation_percent: float


class ClusterUtilisationOut(UtilisationOut):
    tenant: str
    cluster: str
    history: list[UtilisationPoint] | None = Field(
        default=None, description="mean utilisation over the last day (with `history=true`); "
                                  "null when unknown")


class TenantClusterUtilisation(BaseModel):
    cluster: str | None = Field(description="null: the tenant's dedicated nodes with no pod of "
                                            "one of its clusters on them")
    utilisation: UtilisationOut


class TenantUtilisationOut(UtilisationOut):
    tenant: str
    clusters: list[TenantClusterUtilisation] = []


class IdleGpuOut(BaseModel):
    tenant: str
    cluster: str | None
    gpu_class: str
    node: str
    gpu: str
    uuid: str
    model: str
    namespace: str
    pod: str
    utilisation_percent: float
    peak_in_window_percent: float


class IdleGpusOut(BaseModel):
    known: bool
    reason: str | None = None
    idle_threshold_percent: float
    idle_window_minutes: int
    observed_at: datetime | None = None
    items: list[IdleGpuOut] | None = Field(
        default=None, description="GPUs bound but idle past the window; null when unknown")
