"""The allocation ledger (append-only) and the live use samples (raw, then hourly)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.database.core import Base, utcnow
from app.database.grant_units import UNITS_CHECK, profile_column, unit_column

LEDGER_KINDS = ("quota", "cluster", "node", "sleep")
SAMPLE_SOURCES = ("queue", "quota", "node")


def _amount_of_gpus(context: Any) -> int | None:
    """An entry written with ``gpus`` alone holds that many whole GPUs."""
    if context is None:
        return None
    given = context.get_current_parameters()
    return int(given["gpus"]) if given.get("unit", "gpu") == "gpu" else None


class LedgerEntry(Base):
    """From ``at`` on, ``gpus`` GPUs of a class are held by one subject of a tenant.

    A subject is a tenant's quota of a class (``quota``), a virtual cluster (``cluster``) or a
    dedicated node assignment (``node``); ``sleep`` is a shared-pool cluster's GPUs freed by
    sleep, from the moment it fell asleep (``asleep_since``) until it woke or was deleted,
    while its ``cluster`` entries go on (the tenant still holds it). Each entry holds until
    the subject's next entry of the same series (kind, subject, tenant, class); an interval is
    thus the gap between two entries, and GPU-seconds are ``gpus`` times its length. ``at_s``
    is ``at`` in whole Unix seconds, so that the database does the arithmetic on every backend.
    Cluster and node ids are no foreign keys: the ledger outlives the rows it describes.
    """

    __tablename__ = "usage_ledger"
    __table_args__ = (
        CheckConstraint("gpus >= 0", name="gpus_non_negative"),
        CheckConstraint("kind IN ('quota', 'cluster', 'node', 'sleep')", name="kind"),
        CheckConstraint(UNITS_CHECK, name="unit"),
        CheckConstraint("amount >= 0", name="amount_non_negative"),
        Index("ix_usage_ledger_tenant_id_at_s", "tenant_id", "at_s"),
        Index("ix_usage_ledger_at_s", "at_s"),
        Index("ix_usage_ledger_kind_subject_id_id", "kind", "subject_id", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime]
    at_s: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(10))
    subject_id: Mapped[int]
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    gpu_class_id: Mapped[int] = mapped_column(ForeignKey("gpu_classes.id"))
    cluster_id: Mapped[int | None]
    cluster_name: Mapped[str] = mapped_column(String(40), default="")
    node_id: Mapped[int | None]
    gpus: Mapped[int]
    # What the subject holds in its unit (app.kit.gpu_units): whole GPUs (then ``gpus``),
    # slices of ``mig_profile`` or hundredths of a GPU; ``gpus`` is 0 on the latter two.
    unit: Mapped[str] = unit_column()
    mig_profile: Mapped[str] = profile_column()
    amount: Mapped[int] = mapped_column(default=_amount_of_gpus)
    # A cluster entry's placement (None: a cluster gone before 0029 recorded it, or another
    # kind): reports tell shared-pool clusters' GPU-hours from dedicated-nodes clusters'.
    placement: Mapped[str | None] = mapped_column(String(20), default=None)


class UsageSample(Base):
    """What the host reported at one resync, kept raw for a short while."""

    __tablename__ = "usage_samples"
    __table_args__ = (
        CheckConstraint("source IN ('queue', 'quota', 'node')", name="source"),
        CheckConstraint(UNITS_CHECK, name="unit"),
        Index("ix_usage_samples_tenant_id_taken_s", "tenant_id", "taken_s"),
        Index("ix_usage_samples_taken_s", "taken_s"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    taken_s: Mapped[int] = mapped_column(BigInteger)
    source: Mapped[str] = mapped_column(String(10))
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    gpu_class_id: Mapped[int | None] = mapped_column(ForeignKey("gpu_classes.id"))
    subject_id: Mapped[int]  # the cluster (queue, quota) or the node
    # What the figures count: GPUs (shares as fractions of one), or slices of ``mig_profile``.
    unit: Mapped[str] = unit_column()
    mig_profile: Mapped[str] = profile_column()
    used_gpus: Mapped[float]
    allocated_gpus: Mapped[float] = mapped_column(default=0.0)
    requested_gpus: Mapped[float] = mapped_column(default=0.0)
    # Of ``used_gpus``, a queue's allocation beyond its quota (app.kube.usage.burst_of).
    burst_gpus: Mapped[float] = mapped_column(default=0.0, server_default="0")
    # It stands until the subject's next sample, at most this long (the worker may stop).
    holds_s: Mapped[int] = mapped_column(default=600, server_default="600")
    # Of ``used_gpus``, how many computed: their utilisation (DCGM) / 100, summed, as the
    # operator's Prometheus said when the sample was taken; None when it could not say (never
    # 0 for unknown). Only queue and node samples have one.
    utilised_gpus: Mapped[float | None] = mapped_column(default=None)


class HourlyUsage(Base):
    """Raw samples of one hour folded into their mean and peak, kept for long."""

    __tablename__ = "usage_hourly"
    __table_args__ = (
        CheckConstraint("source IN ('queue', 'quota', 'node')", name="source"),
        CheckConstraint("samples > 0", name="samples_positive"),
        CheckConstraint(UNITS_CHECK, name="unit"),
        # An hour is folded once: a second worker folding the same hour fails and retries.
        UniqueConstraint("source", "subject_id", "tenant_id", "hour_s", "unit", "mig_profile",
                         name="uq_usage_hourly_subject_hour_unit"),
        Index("ix_usage_hourly_tenant_id_hour_s", "tenant_id", "hour_s"),
        Index("ix_usage_hourly_hour_s", "hour_s"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    hour_s: Mapped[int] = mapped_column(BigInteger)
    source: Mapped[str] = mapped_column(String(10))
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    gpu_class_id: Mapped[int | None] = mapped_column(ForeignKey("gpu_classes.id"))
    subject_id: Mapped[int]
    unit: Mapped[str] = unit_column()
    mig_profile: Mapped[str] = profile_column()
    samples: Mapped[int]
    mean_used_gpus: Mapped[float]
    peak_used_gpus: Mapped[float]
    mean_allocated_gpus: Mapped[float] = mapped_column(default=0.0)
    mean_requested_gpus: Mapped[float] = mapped_column(default=0.0)
    # The hour's samples, each standing until the next (at most its holds_s), integrated.
    used_gpu_seconds: Mapped[float] = mapped_column(default=0.0, server_default="0")
    burst_gpu_seconds: Mapped[float] = mapped_column(default=0.0, server_default="0")
    # Of the hour's used GPU-seconds, those computing (utilisation-weighted), and those whose
    # samples had a utilisation figure at all: the coverage of the first.
    utilised_gpu_seconds: Mapped[float] = mapped_column(default=0.0, server_default="0")
    utilisation_known_seconds: Mapped[float] = mapped_column(default=0.0, server_default="0")


class GpuReclaim(Base):
    """A pod KAI Scheduler evicted from a tenant's cluster (reclaimed its borrowed GPUs,
    preempted it, or moved it), from the event KAI recorded: kept once per event."""

    __tablename__ = "gpu_reclaims"
    __table_args__ = (Index("ix_gpu_reclaims_cluster_id_id", "cluster_id", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    event_uid: Mapped[str] = mapped_column(String(64), unique=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    cluster_id: Mapped[int] = mapped_column(
        ForeignKey("virtual_clusters.id", ondelete="CASCADE"))
    pod: Mapped[str] = mapped_column(String(253))
    action: Mapped[str] = mapped_column(String(20))
    recorded_at: Mapped[datetime] = mapped_column(default=utcnow)
