"""Virtual clusters: the desired spec, the reconciler's progress and its lease."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    CheckConstraint,
    ForeignKey,
    Index,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.database.core import Base, utcnow
from app.database.grant_units import (
    GPU_AMOUNT_CHECK,
    PROFILE_CHECK,
    UNITS_CHECK,
    WHOLE_ONLY_CHECK,
    amount_follows_gpus,
    profile_column,
    unit_column,
)

PLACEMENTS = ("shared-pool", "dedicated-nodes", "private-nodes")


@amount_follows_gpus
class VirtualCluster(Base):
    __tablename__ = "virtual_clusters"
    __table_args__ = (
        UniqueConstraint("tenant_id", "name"),
        CheckConstraint(UNITS_CHECK, name="unit"),
        CheckConstraint(PROFILE_CHECK, name="unit_profile"),
        CheckConstraint(GPU_AMOUNT_CHECK, name="gpu_amount"),
        CheckConstraint(WHOLE_ONLY_CHECK, name="whole_gpus_only"),
        CheckConstraint("amount >= 0", name="amount_non_negative"),
        # MIG slices and shares are only in the shared pool (no dedicated MIG nodes).
        CheckConstraint("unit = 'gpu' OR placement = 'shared-pool'",
                        name="parts_in_shared_pool"),
        CheckConstraint("placement IN ('shared-pool', 'dedicated-nodes', 'private-nodes')",
                        name="placement"),
        CheckConstraint("gpus >= 0", name="gpus_non_negative"),
        CheckConstraint("pod_security IS NULL OR pod_security IN ('restricted', 'baseline')",
                        name="pod_security"),
        CheckConstraint("cpu_millicores >= 0", name="cpu_non_negative"),
        CheckConstraint("memory_mib >= 0", name="memory_non_negative"),
        CheckConstraint("generation >= 1", name="generation_positive"),
        CheckConstraint("power IN ('awake', 'asleep')", name="power"),
        CheckConstraint("sleep_after_idle_minutes IS NULL OR sleep_after_idle_minutes > 0",
                        name="idle_minutes_positive"),
        CheckConstraint("delete_after_sleep_days IS NULL OR delete_after_sleep_days > 0",
                        name="delete_days_positive"),
        CheckConstraint("idle_measure IN ('bound', 'utilisation')", name="idle_measure"),
        Index("ix_virtual_clusters_tenant_id_id", "tenant_id", "id"),  # a tenant's list
        # Placement's sum of the shared pool's GPUs of a class per host, from the index alone.
        Index("ix_virtual_clusters_shared_pool_gpus", "gpu_class_id", "host_cluster_id",
              postgresql_include=["gpus"], postgresql_where=text("placement = 'shared-pool'"),
              sqlite_where=text("placement = 'shared-pool'")),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    host_cluster_id: Mapped[int] = mapped_column(ForeignKey("host_clusters.id"))
    # Why placement chose that host (app/clusters/placement.py), as the tenant sees it.
    placement_reason: Mapped[str] = mapped_column(Text, default="")
    name: Mapped[str] = mapped_column(String(40))
    kubernetes_version: Mapped[str] = mapped_column(String(20))
    placement: Mapped[str] = mapped_column(String(20))
    gpu_class_id: Mapped[int | None] = mapped_column(ForeignKey("gpu_classes.id"))
    gpus: Mapped[int] = mapped_column(default=0)
    # What the cluster holds of its class, in one unit for its life (app.kit.gpu_units):
    # ``amount`` whole GPUs (then ``gpus``), slices of ``mig_profile``, or hundredths of a GPU.
    unit: Mapped[str] = unit_column()
    mig_profile: Mapped[str] = profile_column()
    amount: Mapped[int]
    # The template version the cluster was made from (or last upgraded to), and the hardening it
    # fixed; the templates domain resolves a template into these concrete fields.
    template_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("cluster_template_versions.id"))
    # None: the operator's PORTAL_POD_SECURITY.
    pod_security: Mapped[str | None] = mapped_column(String(10))
    user_namespaces: Mapped[bool] = mapped_column(default=False)
    # The add-ons the template fixes ({name, repo, chart, version, values}); the reconciler
    # installs them into the virtual cluster once it is Ready.
    addons: Mapped[list[Any]] = mapped_column(default=list)
    cpu_millicores: Mapped[int] = mapped_column(default=0)
    memory_mib: Mapped[int] = mapped_column(default=0)
    generation: Mapped[int] = mapped_column(default=1)
    observed_generation: Mapped[int] = mapped_column(default=0)
    conditions: Mapped[list[Any]] = mapped_column(default=list)
    endpoint: Mapped[str] = mapped_column(String(500), default="")
    admin_kubeconfig_encrypted: Mapped[str | None]
    over_quota: Mapped[bool] = mapped_column(default=False)
    deletion_requested_at: Mapped[datetime | None]
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    failed_attempts: Mapped[int] = mapped_column(default=0)
    # Sleep (issue 28): what the cluster should be, why and since when it was asked; the
    # worker sets asleep_since once the control plane is down and clears it once it is back.
    power: Mapped[str] = mapped_column(String(10), default="awake", server_default="awake")
    power_reason: Mapped[str] = mapped_column(String(20), default="", server_default="")
    power_changed_at: Mapped[datetime | None]
    asleep_since: Mapped[datetime | None]
    # Sleep policy: never, after minutes without a GPU pod bound, on a schedule in a time zone,
    # and deletion after days asleep (warned once, a set time before).
    never_sleep: Mapped[bool] = mapped_column(default=False, server_default=false())
    sleep_after_idle_minutes: Mapped[int | None]
    # What idle means for those minutes: no GPU pod bound ("bound"), or also every GPU bound
    # below the idle threshold ("utilisation").
    idle_measure: Mapped[str] = mapped_column(String(12), default="bound",
                                              server_default="bound")
    sleep_schedule: Mapped[str | None] = mapped_column(String(200))
    sleep_timezone: Mapped[str] = mapped_column(String(64), default="UTC", server_default="UTC")
    delete_after_sleep_days: Mapped[int | None]
    deletion_warned_at: Mapped[datetime | None]
    # When the announced deletion happens (set with the warning, cleared on waking).
    deletion_due_at: Mapped[datetime | None]


class ClusterGpuWait(Base):
    """The cluster's GPU pods that KAI has not bound yet, as the worker last saw them on the
    host, and KAI's reason: pages read this, never the host."""

    __tablename__ = "cluster_gpu_waits"
    __table_args__ = (CheckConstraint("pods >= 0", name="pods_non_negative"),)

    cluster_id: Mapped[int] = mapped_column(
        ForeignKey("virtual_clusters.id", ondelete="CASCADE"), primary_key=True)
    pods: Mapped[int] = mapped_column(default=0)
    reason: Mapped[str] = mapped_column(Text, default="")
    observed_at: Mapped[datetime]


class ClusterGpusInUse(Base):
    """What KAI has allocated to the cluster's leaf queue, as the worker last read it: the part
    within the queue's quota (guaranteed) and the part beyond it (burst), which KAI takes back
    when another queue needs its guarantee. Only clusters with a leaf queue have a row."""

    __tablename__ = "cluster_gpus_in_use"
    __table_args__ = (CheckConstraint("guaranteed_gpus >= 0 AND burst_gpus >= 0",
                                      name="gpus_non_negative"),)

    cluster_id: Mapped[int] = mapped_column(
        ForeignKey("virtual_clusters.id", ondelete="CASCADE"), primary_key=True)
    guaranteed_gpus: Mapped[float]
    burst_gpus: Mapped[float]
    observed_at: Mapped[datetime]


class ConditionTransition(Base):
    """One change of one of a cluster's conditions (a new status, or its first one), as the
    worker wrote it: the cluster page draws the latest of them (``KEPT_TRANSITIONS``) as a
    timeline; the conditions themselves hold only the latest of each type."""

    __tablename__ = "condition_transitions"
    __table_args__ = (Index("ix_condition_transitions_cluster_id_id", "cluster_id", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    cluster_id: Mapped[int] = mapped_column(
        ForeignKey("virtual_clusters.id", ondelete="CASCADE"))
    type: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(10))
    reason: Mapped[str] = mapped_column(String(200), default="")
    message: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime]
