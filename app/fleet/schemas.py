"""Shapes of the fleet's capacity and of the GPU-hours sleep freed on the API. Hosts by name
and region: never credentials."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class HostCapacityOut(BaseModel):
    host_cluster: str
    region: str
    state: str = Field(description="active, cordoned or draining")
    reachable: bool | None = Field(description="the host's last health check; null: never run")
    gpu_class: str
    display_name: str
    total: int = Field(description="whole GPUs on live nodes of the class on the host")
    dedicated: int = Field(description="of those, on nodes dedicated to tenants")
    guaranteed: int = Field(description="held by the shared-pool clusters placed on the host")
    free: int = Field(description="total - dedicated - guaranteed")
    not_ready: int = Field(description="on nodes that are not ready (part of the total)")
    borrowed: float = Field(
        description="burst GPUs in use: what KAI allocated to the leaf queues on the host "
                    "beyond their quotas, summed over tenants, as the worker last read the host")
    lent_from_idle_guarantees: float = Field(
        description="of borrowed, what the ready GPUs nobody is guaranteed cannot cover: "
                    "max(0, borrowed - (total - not_ready - guaranteed)). KAI lent these from "
                    "guarantees their owners leave idle and reclaims them when the owners need "
                    "their guarantee")


class RegionCapacityOut(BaseModel):
    region: str
    gpu_class: str
    display_name: str
    hosts: list[str]
    total: int
    dedicated: int
    guaranteed: int = Field(description="the tenants' approved quota of the class in the region")
    free: int = Field(description="total - dedicated - the quota dedicated nodes do not cover")
    not_ready: int


class FleetCapacityOut(BaseModel):
    hosts: list[HostCapacityOut] = Field(description="per host and class")
    regions: list[RegionCapacityOut] = Field(description="per region and class")


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
