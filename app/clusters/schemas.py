"""Shapes of virtual clusters on the API and in forms. Credentials never appear here."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

from app.clusters import sleep_schedule
from app.kit.gpu_units import MAX_PROFILE_LENGTH
from app.kit.validation import MAX_ROW_ID, SingleLine, dns_label_problem
from app.quotas.schemas import (
    MAX_CPU_MILLICORES,
    MAX_GPUS,
    MAX_MEMORY_MIB,
    SHARE_DESCRIPTION,
    SLICES_DESCRIPTION,
    GpuShare,
)

# The column holds 40 characters; longer names would also crowd the derived host names.
NAME_MAX = 40
Placement = Literal["shared-pool", "dedicated-nodes", "private-nodes"]


class ClusterCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=NAME_MAX,
                      description="DNS-1123 label: lowercase letters, digits and '-'")
    kubernetes_version: SingleLine | None = Field(
        default=None, max_length=20, description="one of the operator's versions; default first"
    )
    placement: Placement = "shared-pool"
    region: SingleLine | None = Field(
        default=None, max_length=63,
        description="the region of host clusters to run in; none or empty: the portal chooses "
                    "a region where the tenant's quota of the class has room")
    gpu_class_id: StrictInt | None = Field(default=None, ge=1, le=MAX_ROW_ID)
    gpus: StrictInt = Field(default=0, ge=0, le=MAX_GPUS)
    # Instead of whole GPUs (issue 61): slices of one MIG profile, or a share of one GPU; such
    # a cluster is in the shared pool, and keeps its unit for its life.
    slices: StrictInt | None = Field(default=None, ge=1, le=MAX_GPUS,
                                     description=SLICES_DESCRIPTION + ", instead of gpus")
    mig_profile: SingleLine | None = Field(default=None, max_length=MAX_PROFILE_LENGTH,
                                           examples=["1g.10gb"],
                                           description="the MIG profile of the slices")
    gpu_share: GpuShare | None = Field(default=None, examples=["0.5"],
                                       description=SHARE_DESCRIPTION + ", instead of gpus")
    cpu_millicores: StrictInt = Field(default=4000, ge=0, le=MAX_CPU_MILLICORES)
    memory_mib: StrictInt = Field(default=16384, ge=0, le=MAX_MEMORY_MIB)
    template: SingleLine | None = Field(
        default=None, max_length=40,
        description='an offered cluster template; default "default". Settings the template '
                    "fixes (placement, GPU class, Kubernetes version) must then be left out")
    template_version: StrictInt | None = Field(
        default=None, ge=1, le=MAX_ROW_ID,
        description="an offered version of the template; default its newest offered one")

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        problem = dns_label_problem(value, NAME_MAX)
        if problem:
            raise ValueError(problem)
        return value


class ClusterResize(BaseModel):
    """Any of the sizes; those left out keep their value."""

    model_config = ConfigDict(extra="forbid")

    gpus: StrictInt | None = Field(default=None, ge=0, le=MAX_GPUS)
    slices: StrictInt | None = Field(default=None, ge=1, le=MAX_GPUS,
                                     description="of a cluster of MIG slices: its new count")
    gpu_share: GpuShare | None = Field(default=None,
                                       description="of a cluster of a share: its new share")
    cpu_millicores: StrictInt | None = Field(default=None, ge=0, le=MAX_CPU_MILLICORES)
    memory_mib: StrictInt | None = Field(default=None, ge=0, le=MAX_MEMORY_MIB)


class ConditionOut(BaseModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    lastTransitionTime: str  # noqa: N815 - the Kubernetes condition field name
    observedGeneration: int  # noqa: N815


class GpuWaitOut(BaseModel):
    """The cluster's GPU pods that KAI has not bound yet, as the worker last saw the host."""

    pods: int = Field(description="GPU pods of the cluster waiting for GPUs")
    reason: str = Field(description="why, as KAI's scheduler put it (the most common reason "
                                    "among them); empty until KAI has looked at them")
    message: str = Field(description="the same in a sentence, as the page shows it")
    observed_at: datetime


class PowerOut(BaseModel):
    """Whether the cluster should sleep, why, and whether it does."""

    wanted: Literal["awake", "asleep"] = Field(
        description="asleep: its control plane is scaled to zero, its pods removed from the "
                    "host and its GPU guarantee given back to the pool; its own objects and "
                    "kubeconfigs are kept")
    reason: str = Field(description="manual, idle, schedule (sleep); manual, kubeconfig (wake)")
    changed_at: datetime | None = Field(description="when it was asked")
    asleep_since: datetime | None = Field(description="when it fell asleep; null while awake")


# Idle minutes (5 minutes to a week) and days asleep before deletion (a day to a year).
IDLE_MINUTES = (5, 7 * 24 * 60)
DELETE_DAYS = (1, 365)
IdleMeasure = Literal["bound", "utilisation"]
IDLE_MEASURE_MEANS = (
    "what idle means for the idle minutes: bound (no GPU pod bound), or utilisation (also "
    "idle while every GPU bound for all those minutes stayed below the operator's idle "
    "threshold, PORTAL_IDLE_GPU_UTILISATION_PERCENT, as the DCGM exporter reports through "
    "Prometheus; while that reading is unknown the cluster is not put to sleep for it)")


class SleepPolicyIn(BaseModel):
    """A cluster's whole sleep policy (what is left out takes its default: off)."""

    model_config = ConfigDict(extra="forbid")

    never_sleep: StrictBool = Field(
        default=False, description="no idle or scheduled sleep and no deletion; a tenant "
                                   "admin may still put it to sleep by hand")
    sleep_after_idle_minutes: StrictInt | None = Field(
        default=None, ge=IDLE_MINUTES[0], le=IDLE_MINUTES[1],
        description="sleep after this many minutes without a GPU pod bound; null: never")
    idle_measure: IdleMeasure = Field(default="bound", description=IDLE_MEASURE_MEANS)
    sleep_schedule: SingleLine | None = Field(
        default=None, max_length=sleep_schedule.MAX_LENGTH,
        description='asleep in these hours, e.g. "weekdays 20:00-08:00, weekends", '
                    '"mon-fri 19:00-07:30", "daily 00:00-06:00", "sat,sun"; null or empty: '
                    "none")
    sleep_timezone: SingleLine = Field(
        default="UTC", max_length=64, description="the schedule's IANA time zone")
    delete_after_sleep_days: StrictInt | None = Field(
        default=None, ge=DELETE_DAYS[0], le=DELETE_DAYS[1],
        description="deleted after this many days asleep, warned a set time before; null: "
                    "never")

    @field_validator("sleep_schedule")
    @classmethod
    def _schedule(cls, value: str | None) -> str | None:
        text = (value or "").strip()
        if not text:
            return None
        sleep_schedule.parse(text)
        return text

    @field_validator("sleep_timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        sleep_schedule.zone(value)
        return value


class SleepPolicyOut(BaseModel):
    never_sleep: bool = Field(description="no idle or scheduled sleep, no deletion")
    sleep_after_idle_minutes: int | None = Field(
        description="sleep after this many minutes without a GPU pod bound; null: never")
    idle_measure: IdleMeasure = Field(description=IDLE_MEASURE_MEANS)
    sleep_schedule: str | None = Field(
        description='asleep in these hours, e.g. "weekdays 20:00-08:00, weekends"')
    sleep_timezone: str = Field(description="the schedule's IANA time zone")
    delete_after_sleep_days: int | None = Field(
        description="deleted after this many days asleep (warned before); null: never")
    deletion_warned_at: datetime | None = Field(
        description="when the coming deletion was announced")
    deletes_at: datetime | None = Field(
        description="when the cluster will be deleted if it stays asleep; null while awake "
                    "or without deletion")


class GpusInUseOut(BaseModel):
    """What KAI has allocated to the cluster's leaf queue, as the worker last read the host."""

    guaranteed: float = Field(
        description="GPUs in use within the cluster's guarantee (its leaf queue's quota)")
    burst: float = Field(
        description="GPUs in use beyond the guarantee, lent by KAI from idle GPUs of the pool. "
                    "Burst GPUs may be reclaimed by KAI when their owners need their guarantee: "
                    "the pods holding them may be preempted at any time")
    reclaimable: bool = Field(description="true when some GPUs in use are burst")
    observed_at: datetime


class PrivateNodeOut(BaseModel):
    machine: str = Field(description="the bare-metal machine")
    gpus: int
    phase: str = Field(description="the machine's phase: provisioning, joined (its node is Ready "
                                   "in the cluster), deprovisioning, ...")
    node: str | None = Field(description="its Node in the cluster, once registered")
    leaving: bool = Field(description="given back: leaving the cluster, to be wiped")


class ClusterOut(BaseModel):
    id: int
    tenant: str
    name: str
    kubernetes_version: str
    placement: str
    gpu_class_id: int | None
    gpu_class: str | None
    gpu_class_name: str | None = Field(description="the class's display name, as pages show it")
    gpus: int
    cpu_millicores: int
    memory_mib: int
    template_version_id: int | None
    pod_security: str | None = Field(description="null: the operator's default level")
    user_namespaces: bool
    generation: int
    observed_generation: int
    phase: str = Field(description="a one-word summary of the conditions, for lists")
    ready: bool
    over_quota: bool
    deleting: bool
    endpoint: str
    region: str = Field(description="the region of the host cluster the cluster runs on")
    host_cluster: str = Field(description="the host cluster it runs on")
    placement_reason: str = Field(description="why the portal placed it on that host")
    conditions: list[ConditionOut]
    waiting_for_gpus: GpuWaitOut | None = Field(
        description="its pods waiting for GPUs; null until the worker has looked at its host")
    gpus_in_use: GpusInUseOut | None = Field(
        description="GPUs KAI has allocated to its leaf queue, guaranteed and burst; burst "
                    "GPUs may be reclaimed by KAI when their owners need their guarantee. Null "
                    "until the worker has read its queue (and for dedicated-nodes clusters, "
                    "which have none)")
    power: PowerOut = Field(description="asleep or awake, as asked, and since when")
    sleep_policy: SleepPolicyOut
    private_nodes: list[PrivateNodeOut] = Field(
        default_factory=list, description="a private-nodes cluster's machines and their nodes "
                                          "(empty for the other placements)")
    created_at: datetime
    updated_at: datetime
    unit: str = Field(default="gpu", description='"gpu" (whole GPUs), "mig" (MIG slices of '
                                                 'mig_profile) or "share" (a share of one GPU)')
    mig_profile: str = Field(default="", description="the MIG profile of a cluster of slices")
    amount: int = Field(default=0, description="what it holds in the unit's steps: GPUs, "
                                               "slices or hundredths of a GPU")
    slices: int | None = Field(default=None, description="MIG slices it holds")
    gpu_share: str | None = Field(default=None, description="the share of one GPU it holds")
    grant: str = Field(default="", examples=["2 \u00d7 1g.10gb of A100 SXM4 80GB"],
                       description="what it holds, in words; empty without GPUs")


class ClusterPreview(BaseModel):
    """What the worker would apply on the host cluster, for an operator's review."""

    namespace: str
    release: str
    objects: list[dict[str, Any]]
    objects_yaml: str
    values_yaml: str
    helm_command: list[str]
