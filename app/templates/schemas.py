"""Shapes of cluster templates on the API and in forms."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from app.clusters import sleep_schedule
from app.clusters.schemas import DELETE_DAYS, IDLE_MINUTES, IdleMeasure, Placement
from app.kit.validation import MAX_ROW_ID, SingleLine, Visible, dns_label_problem
from app.quotas.schemas import MAX_GPUS
from app.templates.addons import addon_values

NAME_MAX = 40
MAX_ADDONS = 10
MAX_ADDON_SETTINGS = 20
AddonSetting = StrictBool | StrictInt | Visible
_SETTING_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,62}(\.[A-Za-z][A-Za-z0-9_-]{0,62}){0,7}$")
PodSecurity = Literal["restricted", "baseline"]
State = Literal["draft", "offered", "retired"]
_K8S_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
# A Helm chart version as charts publish them (SemVer 2, optional leading v).
_CHART_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")


def _dns_label(value: str, max_len: int) -> str:
    problem = dns_label_problem(value, max_len)
    if problem:
        raise ValueError(problem)
    return value


class AddonSpec(BaseModel):
    """A Helm chart installed into the virtual cluster, pinned to one version."""

    model_config = ConfigDict(extra="forbid")

    name: SingleLine = Field(min_length=1, max_length=40, description="DNS-1123 label")
    repo: SingleLine = Field(max_length=300, description=(
        "the chart repository: an https URL (a Helm repository with index.yaml) or "
        "oci://registry/path (the chart is <repo>/<chart> in the registry)"))
    chart: SingleLine = Field(min_length=1, max_length=100)
    version: SingleLine = Field(max_length=60, description="the pinned chart version (SemVer)")
    settings: dict[str, AddonSetting] = Field(
        default_factory=dict, max_length=MAX_ADDON_SETTINGS,
        description="Helm values the portal sets, as dotted keys (scheduler.replicas); "
                    "the only values the chart gets")

    @field_validator("name", "chart")
    @classmethod
    def _label(cls, value: str) -> str:
        return _dns_label(value, 100)

    @field_validator("repo")
    @classmethod
    def _https(cls, value: str) -> str:
        if not re.fullmatch(r"(https|oci)://[A-Za-z0-9.-]+(:\d+)?(/[A-Za-z0-9._~/-]*)?", value):
            raise ValueError("must be an https:// or oci:// URL without query or credentials")
        return value.rstrip("/")

    @field_validator("version")
    @classmethod
    def _pinned(cls, value: str) -> str:
        if not _CHART_VERSION.fullmatch(value):
            raise ValueError("must be one exact chart version such as 1.2.3 (no ranges)")
        return value

    @field_validator("settings")
    @classmethod
    def _settings(cls, value: dict[str, AddonSetting]) -> dict[str, AddonSetting]:
        for key, setting in value.items():
            if not _SETTING_KEY.fullmatch(key):
                raise ValueError(f"{key!r}: keys are dotted names such as scheduler.replicas")
            if isinstance(setting, str) and ("\n" in setting or len(setting) > 200):
                raise ValueError(f"{key!r}: text values are one line of at most 200 characters")
        addon_values(value)  # refuses a key that is both a value and a section
        return value


class VersionSettings(BaseModel):
    """What a template version fixes. None leaves a setting open for the tenant."""

    model_config = ConfigDict(extra="forbid")

    placement: Placement | None = None
    kubernetes_version: SingleLine | None = Field(
        default=None, max_length=20, description="MAJOR.MINOR.PATCH; null: tenant picks")
    gpu_class_id: StrictInt | None = Field(default=None, ge=1, le=MAX_ROW_ID,
                                           description="null: tenant picks")
    default_gpus: StrictInt = Field(default=0, ge=0, le=MAX_GPUS)
    max_gpus: StrictInt | None = Field(default=None, ge=0, le=MAX_GPUS,
                                       description="null: only the tenant's quota limits it")
    pod_security: PodSecurity | None = Field(
        default="restricted", description="null: the operator's PORTAL_POD_SECURITY")
    user_namespaces: StrictBool = Field(
        default=False, description="pods run with hostUsers: false (the host must support it)")
    addons: list[AddonSpec] = Field(default_factory=list, max_length=MAX_ADDONS)
    # Sleep policy defaults of the clusters made from the version (null: none); a cluster's
    # tenant admins may change them afterwards.
    never_sleep: StrictBool | None = Field(default=None, description="null: false")
    sleep_after_idle_minutes: StrictInt | None = Field(
        default=None, ge=IDLE_MINUTES[0], le=IDLE_MINUTES[1],
        description="new clusters sleep after this many minutes without a GPU pod bound")
    idle_measure: IdleMeasure | None = Field(
        default=None, description="what idle means for new clusters' idle minutes: bound (no "
                                  "GPU pod bound) or utilisation (also every GPU below the "
                                  "idle threshold); null: bound")
    sleep_schedule: SingleLine | None = Field(
        default=None, max_length=sleep_schedule.MAX_LENGTH,
        description='new clusters sleep in these hours, e.g. "weekdays 20:00-08:00, weekends"')
    sleep_timezone: SingleLine | None = Field(
        default=None, max_length=64, description="the schedule's IANA time zone; null: UTC")
    delete_after_sleep_days: StrictInt | None = Field(
        default=None, ge=DELETE_DAYS[0], le=DELETE_DAYS[1],
        description="new clusters are deleted after this many days asleep (announced first)")

    @field_validator("sleep_schedule")
    @classmethod
    def _schedule(cls, value: str | None) -> str | None:
        if value is not None and value.strip():
            sleep_schedule.parse(value.strip())
            return value.strip()
        return None

    @field_validator("sleep_timezone")
    @classmethod
    def _timezone(cls, value: str | None) -> str | None:
        if value is not None:
            sleep_schedule.zone(value)
        return value

    @field_validator("kubernetes_version")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        if value is not None and not _K8S_VERSION.fullmatch(value):
            raise ValueError("must be MAJOR.MINOR.PATCH, e.g. 1.32.4")
        return value

    @model_validator(mode="after")
    def _sizes(self) -> VersionSettings:
        if self.max_gpus is not None and self.max_gpus < self.default_gpus:
            raise ValueError("max_gpus must be at least default_gpus")
        if len({a.name for a in self.addons}) != len(self.addons):
            raise ValueError("add-on names must be unique")
        return self


class VersionEdit(VersionSettings):
    """A new version: the fields given replace those of the newest version, the rest are copied."""


class TemplateCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=NAME_MAX, description="DNS-1123 label")
    description: SingleLine = Field(default="", max_length=500)
    settings: VersionSettings = Field(default_factory=VersionSettings,
                                      description="version 1, a draft")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _dns_label(value, NAME_MAX)


class CheckOut(BaseModel):
    name: str
    passed: bool
    reasons: list[str]


class ValidationOut(BaseModel):
    passed: bool
    checks: list[CheckOut]
    note: str | None = None


class VersionOut(VersionSettings):
    model_config = ConfigDict(extra="ignore")

    version: int
    state: State
    gpu_class: str | None = Field(description="the GPU class's product label")
    validation: ValidationOut | None = Field(description="the last result the worker stored")
    validation_pending: bool = Field(
        description="a validation is queued or running in the worker; offering waits for it")
    validation_requested_at: datetime | None
    validated_at: datetime | None
    offered_at: datetime | None
    retired_at: datetime | None
    created_at: datetime


class TemplateOut(BaseModel):
    name: str
    description: str
    latest_offered: int | None
    versions: list[VersionOut] = Field(description="platform admins see every version, "
                                                   "others the offered ones")


class ClusterUpgradeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: StrictInt | None = Field(default=None, ge=1, le=MAX_ROW_ID,
                                      description="default: the newest offered version")
