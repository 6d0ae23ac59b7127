"""A bare-metal GPU machine, registered by its BMC, driven through Metal3 on its host cluster."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from app.database.core import Base, utcnow

# What the admin asks: kept in the pool (registered, inspected, powered, no image), or
# provisioned (imaged, booted, joined to the host cluster as a Node); or what a private-nodes
# cluster asks: private (imaged, booted, joined to that virtual cluster as a Node).
DESIRED_STATES = ("pool", "provisioned", "private")
# What the worker last read from Metal3 (and, for joined, from the host's Node).
PHASES = ("registering", "inspecting", "available", "provisioning", "joined",
          "deprovisioning", "failed")


class Machine(Base):
    __tablename__ = "machines"
    __table_args__ = (
        CheckConstraint("desired IN ('pool', 'provisioned', 'private')", name="desired_known"),
        # A private machine is always some cluster's: one column, so one cluster, one tenant.
        CheckConstraint("desired <> 'private' OR cluster_id IS NOT NULL",
                        name="private_has_cluster"),
        CheckConstraint("phase IN ('registering', 'inspecting', 'available', 'provisioning', "
                        "'joined', 'deprovisioning', 'failed')", name="phase_known"),
        CheckConstraint("gpu_count >= 0", name="gpu_count_non_negative"),
        CheckConstraint("generation >= 1", name="generation_positive"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    host_cluster_id: Mapped[int] = mapped_column(ForeignKey("host_clusters.id"), index=True)
    bmc_address: Mapped[str] = mapped_column(String(500))
    # SecretBox ciphertext of {"username", "password"}: opened only to write the BMC Secret.
    bmc_credentials_encrypted: Mapped[str]
    bmc_credentials_set_at: Mapped[datetime] = mapped_column(default=utcnow)
    boot_mac: Mapped[str] = mapped_column(String(17))
    gpu_class_id: Mapped[int] = mapped_column(ForeignKey("gpu_classes.id"), index=True)
    gpu_count: Mapped[int] = mapped_column(default=0)
    rack: Mapped[str] = mapped_column(String(63), default="")
    desired: Mapped[str] = mapped_column(String(20), default="pool")
    # Set by a delete request: the worker removes the BareMetalHost and secrets, then the row.
    deleting_at: Mapped[datetime | None]
    phase: Mapped[str] = mapped_column(String(20), default="registering")
    # Metal3's errorMessage when failed, what the machine waits for, or how a joined machine's
    # node differs from the GPUs expected.
    reason: Mapped[str] = mapped_column(String(1000), default="")
    # Metal3's provisioning state as last read ('' before the BareMetalHost is seen).
    provisioning_state: Mapped[str] = mapped_column(String(40), default="")
    node_name: Mapped[str | None] = mapped_column(String(253))
    # Only the id of the bootstrap token minted for the machine's join: its secret lives in
    # the host cluster's kube-system Secret, never in the portal's database.
    bootstrap_token_id: Mapped[str | None] = mapped_column(String(6))
    bootstrap_token_expires_at: Mapped[datetime | None]
    # The private-nodes cluster the machine serves, from its assignment until it is back in
    # the pool, wiped (``available`` again): set only by a conditional UPDATE of a free
    # machine (``repository.assign``), cleared only once it is returned.
    cluster_id: Mapped[int | None] = mapped_column(ForeignKey("virtual_clusters.id"),
                                                   index=True)
    assigned_at: Mapped[datetime | None]
    generation: Mapped[int] = mapped_column(default=1)
    observed_generation: Mapped[int] = mapped_column(default=0)
    conditions: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
