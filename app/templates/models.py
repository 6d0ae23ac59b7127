"""Cluster templates: operator presets a tenant picks from, each in immutable versions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.database.core import Base, utcnow

VERSION_STATES = ("draft", "offered", "retired")
DEFAULT_TEMPLATE = "default"


class ClusterTemplate(Base):
    __tablename__ = "cluster_templates"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(40), unique=True)
    description: Mapped[str] = mapped_column(String(500), default="")
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ClusterTemplateVersion(Base):
    """One version of a template. Its settings never change; only validation and state do.

    A setting left empty (None) is open: the tenant chooses it when creating a cluster.
    """

    __tablename__ = "cluster_template_versions"
    __table_args__ = (
        UniqueConstraint("template_id", "version"),
        CheckConstraint("state IN ('draft', 'offered', 'retired')", name="state"),
        CheckConstraint("placement IS NULL OR placement IN ('shared-pool', 'dedicated-nodes')",
                        name="placement"),
        CheckConstraint("pod_security IS NULL OR pod_security IN ('restricted', 'baseline')",
                        name="pod_security"),
        CheckConstraint("default_gpus >= 0", name="default_gpus_non_negative"),
        CheckConstraint("max_gpus IS NULL OR max_gpus >= default_gpus", name="max_gpus"),
        CheckConstraint("sleep_after_idle_minutes IS NULL OR sleep_after_idle_minutes > 0",
                        name="idle_minutes_positive"),
        CheckConstraint("delete_after_sleep_days IS NULL OR delete_after_sleep_days > 0",
                        name="delete_days_positive"),
        CheckConstraint("idle_measure IS NULL OR idle_measure IN ('bound', 'utilisation')",
                        name="idle_measure"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    template_id: Mapped[int] = mapped_column(ForeignKey("cluster_templates.id"))
    version: Mapped[int]
    state: Mapped[str] = mapped_column(String(10), default="draft")
    placement: Mapped[str | None] = mapped_column(String(20))
    kubernetes_version: Mapped[str | None] = mapped_column(String(20))
    gpu_class_id: Mapped[int | None] = mapped_column(ForeignKey("gpu_classes.id"))
    default_gpus: Mapped[int] = mapped_column(default=0)
    max_gpus: Mapped[int | None]
    # None: the operator's PORTAL_POD_SECURITY (the built-in default template's choice).
    pod_security: Mapped[str | None] = mapped_column(String(10))
    user_namespaces: Mapped[bool] = mapped_column(default=False)
    addons: Mapped[list[Any]] = mapped_column(default=list)
    validation: Mapped[dict[str, Any] | None]
    validated_at: Mapped[datetime | None]
    # Set while a validation waits for (or runs in) the worker (queued as template-validation).
    validation_requested_at: Mapped[datetime | None] = mapped_column(index=True)
    offered_at: Mapped[datetime | None]
    retired_at: Mapped[datetime | None]
    # Defaults of the sleep policy for the clusters made from this version (null: none);
    # the tenant's admins may change a cluster's policy afterwards.
    never_sleep: Mapped[bool | None]
    sleep_after_idle_minutes: Mapped[int | None]
    idle_measure: Mapped[str | None] = mapped_column(String(12))
    sleep_schedule: Mapped[str | None] = mapped_column(String(200))
    sleep_timezone: Mapped[str | None] = mapped_column(String(64))
    delete_after_sleep_days: Mapped[int | None]
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
