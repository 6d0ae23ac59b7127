"""Shapes of the fleet's capacity (each figure as ``app.gpu_classes.capacity`` defines it) and of
the GPU-hours sleep freed on the API. Hosts by name and region: never credentials."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from app.gpu_classes.schemas import CapacityFigures


class HostCapacityOut(CapacityFigures):
    """A host's GPUs of one class; ``shared_guaranteed`` is what the shared-pool clusters placed
    on it hold."""

    host_cluster: str
    region: str
    state: str = Field(description="active, cordoned or draining")
    reachable: bool | None = Field(description="the host's last health check; null: never run")
    gpu_class: str
    display_name: str


class RegionCapacityOut(CapacityFigures):
    """A region's GPUs of one class: its hosts' figures with the tenants' quota there."""

    region: str
    gpu_class: str
    display_name: str
    hosts: list[str]


class ClassCapacityOut(CapacityFigures):
    """A class's GPUs over the regions shown: the sums of their figures."""

    gpu_class: str
    display_name: str


class FleetCapacityOut(BaseModel):
    hosts: list[HostCapacityOut] = Field(description="per host and class")
    regions: list[RegionCapacityOut] = Field(description="per region and class")
    classes: list[ClassCapacityOut] = Field(
        description="per class, over the regions listed (the sums of their rows)")


class SleptDayOut(BaseModel):
    day: str = Field(description="YYYY-MM-DD (UTC)")
    slept_gpu_hours: float = Field(
        description="GPU-hours of the class that sleeping clusters gave back to the shared "
                    "pool that day, over all tenants (their usage reports' slept_gpu_hours)")


class ClassSleepOut(BaseModel):
    gpu_class: str
    display_name: str
    today_gpu_hours: float = Field(description="freed by sleep today (UTC), up to now")
    total_gpu_hours: float = Field(description="freed by sleep over all the days")
    days: list[SleptDayOut] = Field(description="oldest first, today last")


class FleetSleepOut(BaseModel):
    start: datetime = Field(description="midnight (UTC) of the first day")
    end: datetime = Field(description="midnight (UTC) after today")
    days: list[str] = Field(description="the days, oldest first, today last")
    classes: list[ClassSleepOut] = Field(description="per GPU class, every class")
class SleepingClusterOut(BaseModel):
    tenant: str
    cluster: str
    host_cluster: str
    gpus: int = Field(description="its GPU guarantee, given back to the pool while it sleeps")
    reason: str = Field(description="why it sleeps: manual, idle or schedule")
    asked_at: datetime | None = Field(description="when it was put to sleep")
    asleep_since: datetime | None = Field(
        description="when its control plane was down; null while it is going to sleep")
    deletion_warned_at: datetime | None = Field(
        description="when its coming deletion was announced")
    deletes_at: datetime | None = Field(
        description="when its sleep policy deletes it; null: never")
