"""The node inventory and dedicated node assignments."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, ForeignKey, Index, String, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from app.database.core import Base, utcnow


class Node(Base):
    """A host node as the inventory sync last saw it; a vanished node is marked gone."""

    __tablename__ = "nodes"
    __table_args__ = (
        UniqueConstraint("host_cluster_id", "name"),
        CheckConstraint("gpu_count >= 0", name="gpu_count_non_negative"),
        # The fleet's filters and orders: by rack, by zone (also its picker) and by readiness,
        # each then by name, the default order of the fleet page.
        Index("ix_nodes_host_rack_name", "host_cluster_id", "rack", "name"),
        Index("ix_nodes_host_zone_name", "host_cluster_id", "zone", "name"),
        Index("ix_nodes_host_ready_name", "host_cluster_id", "ready", "name"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    host_cluster_id: Mapped[int] = mapped_column(ForeignKey("host_clusters.id"))
    name: Mapped[str] = mapped_column(String(253))
    gpu_class_id: Mapped[int | None] = mapped_column(ForeignKey("gpu_classes.id"), index=True)
    gpu_count: Mapped[int] = mapped_column(default=0)
    mig_strategy: Mapped[str] = mapped_column(String(20), default="none")
    mig_resources: Mapped[dict[str, Any]] = mapped_column(default=dict)
    zone: Mapped[str] = mapped_column(String(100), default="")
    rack: Mapped[str] = mapped_column(String(100), default="")
    clique: Mapped[str] = mapped_column(String(200), default="")
    ready: Mapped[bool] = mapped_column(default=False)
    taints: Mapped[list[Any]] = mapped_column(default=list)
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    first_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    gone_at: Mapped[datetime | None]


class NodeAssignment(Base):
    """A node given to one tenant; ended assignments stay as history.

    The partial unique index is what keeps a node with at most one tenant, even under
    parallel requests.
    """

    __tablename__ = "node_assignments"
    __table_args__ = (
        Index(
            "uq_node_assignments_active_node",
            "node_id",
            unique=True,
            postgresql_where=text("ended_at IS NULL"),
            sqlite_where=text("ended_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"), index=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    assigned_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[datetime | None]
    ended_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
