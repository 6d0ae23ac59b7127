"""GPU quota: what tenants ask for and what they were granted."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, ForeignKey, Index, String, Text, UniqueConstraint
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

REQUEST_STATES = ("pending", "approved", "rejected", "cancelled", "expired")


def _unit_checks() -> tuple[CheckConstraint, ...]:
    return (CheckConstraint(UNITS_CHECK, name="unit"),
            CheckConstraint(PROFILE_CHECK, name="unit_profile"),
            CheckConstraint(GPU_AMOUNT_CHECK, name="gpu_amount"),
            CheckConstraint(WHOLE_ONLY_CHECK, name="whole_gpus_only"))


@amount_follows_gpus
class QuotaRequest(Base):
    """A tenant's ask for GPUs of a class in a region: ``amount`` of ``unit`` (whole GPUs, MIG
    slices of ``mig_profile``, or hundredths of one GPU; ``app.kit.gpu_units``). ``gpus`` is
    whole GPUs only, 0 on the other units."""

    __tablename__ = "quota_requests"
    __table_args__ = (
        *_unit_checks(),
        CheckConstraint("gpus >= 0", name="gpus_non_negative"),
        CheckConstraint("amount > 0", name="amount_positive"),
        CheckConstraint("approved_amount IS NULL OR approved_amount >= 0",
                        name="approved_amount_non_neg"),
        CheckConstraint("unit <> 'share' OR (amount BETWEEN 1 AND 100 AND "
                        "(approved_amount IS NULL OR approved_amount <= 100))",
                        name="share_amount"),
        CheckConstraint("cpu_millicores >= 0", name="cpu_non_negative"),
        CheckConstraint("memory_mib >= 0", name="memory_non_negative"),
        CheckConstraint("approved_gpus IS NULL OR approved_gpus >= 0", name="approved_non_neg"),
        CheckConstraint(
            "state IN ('pending', 'approved', 'rejected', 'cancelled', 'expired')", name="state"
        ),
        # The queue by state and a tenant's requests, each in id order.
        Index("ix_quota_requests_state_id", "state", "id"),
        Index("ix_quota_requests_tenant_id_id", "tenant_id", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    gpu_class_id: Mapped[int] = mapped_column(ForeignKey("gpu_classes.id"))
    # The region of the host clusters the quota is for (see app/quotas/regions.py).
    region: Mapped[str] = mapped_column(String(63), default="")
    gpus: Mapped[int]
    unit: Mapped[str] = unit_column()
    mig_profile: Mapped[str] = profile_column()
    # In the unit's steps; ``gpus`` on a whole-GPU request (app.database.grant_units).
    amount: Mapped[int]
    cpu_millicores: Mapped[int] = mapped_column(default=0)
    memory_mib: Mapped[int] = mapped_column(default=0)
    reason: Mapped[str] = mapped_column(Text, default="")
    ends_at: Mapped[datetime | None]
    state: Mapped[str] = mapped_column(String(20), default="pending")
    requested_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    approved_gpus: Mapped[int | None]
    approved_amount: Mapped[int | None]
    overcommitted: Mapped[bool] = mapped_column(default=False)
    decided_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    decided_at: Mapped[datetime | None]
    decision_note: Mapped[str] = mapped_column(Text, default="")


@amount_follows_gpus
class TenantQuota(Base):
    """The approved GPUs of one class (plus CPU/memory) a tenant may spread over its clusters
    in one region, in one unit: whole GPUs, slices of one MIG profile, or hundredths of a GPU
    (one row each)."""

    __tablename__ = "tenant_quotas"
    __table_args__ = (
        UniqueConstraint("tenant_id", "gpu_class_id", "region", "unit", "mig_profile"),
        *_unit_checks(),
        CheckConstraint("amount >= 0", name="amount_non_negative"),
        CheckConstraint("gpus >= 0", name="gpus_non_negative"),
        CheckConstraint("cpu_millicores >= 0", name="cpu_non_negative"),
        CheckConstraint("memory_mib >= 0", name="memory_non_negative"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    gpu_class_id: Mapped[int] = mapped_column(ForeignKey("gpu_classes.id"))
    region: Mapped[str] = mapped_column(String(63), default="")
    gpus: Mapped[int] = mapped_column(default=0)
    unit: Mapped[str] = unit_column()
    mig_profile: Mapped[str] = profile_column()
    amount: Mapped[int]
    cpu_millicores: Mapped[int] = mapped_column(default=0)
    memory_mib: Mapped[int] = mapped_column(default=0)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class GpusInUse(Base):
    """GPUs of a class bound to a tenant's pods on one host, as the worker last read them
    there: KAI's allocation to the tenant's queues plus the pods on its dedicated nodes.
    Summed over a region's hosts it is the "in use" of the tenant's quota there."""

    __tablename__ = "quota_gpus_in_use"
    __table_args__ = (CheckConstraint("gpus >= 0", name="gpus_non_negative"),
                      CheckConstraint(UNITS_CHECK, name="unit"))

    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"),
                                           primary_key=True)
    gpu_class_id: Mapped[int] = mapped_column(ForeignKey("gpu_classes.id", ondelete="CASCADE"),
                                              primary_key=True)
    host_cluster_id: Mapped[int] = mapped_column(
        ForeignKey("host_clusters.id", ondelete="CASCADE"), primary_key=True)
    # What ``gpus`` counts: whole GPUs (fractions as such), or slices of one MIG profile.
    unit: Mapped[str] = mapped_column(String(5), primary_key=True, default="gpu",
                                      server_default="gpu")
    mig_profile: Mapped[str] = mapped_column(String(16), primary_key=True, default="",
                                             server_default="")
    gpus: Mapped[float]
    # Of ``gpus``, those KAI lent beyond the queues' quotas: it may take them back.
    burst_gpus: Mapped[float] = mapped_column(default=0.0, server_default="0")
    observed_at: Mapped[datetime]


class BurstPolicy(Base):
    """How a tenant may use GPUs beyond its guarantee (its approved quota): a tier's preset,
    with what a platform admin set apart from it (NULL: the tier's value). No row: the default
    tier."""

    __tablename__ = "burst_policies"
    __table_args__ = (
        CheckConstraint("burst_gpus IS NULL OR burst_gpus >= -1", name="burst_gpus"),
        CheckConstraint("over_quota_weight IS NULL OR over_quota_weight >= 0", name="weight"),
        CheckConstraint("reclaim_min_runtime_s IS NULL OR reclaim_min_runtime_s >= 0",
                        name="reclaim_min_runtime"),
        CheckConstraint("preempt_min_runtime_s IS NULL OR preempt_min_runtime_s >= 0",
                        name="preempt_min_runtime"),
    )

    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"),
                                           primary_key=True)
    tier: Mapped[str] = mapped_column(String(30))
    # -1: no ceiling but the pool's.
    burst_gpus: Mapped[int | None]
    over_quota_weight: Mapped[int | None]
    reclaim_min_runtime_s: Mapped[int | None]
    preempt_min_runtime_s: Mapped[int | None]
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
