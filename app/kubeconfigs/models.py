"""Kubeconfig grants. The token itself is never stored."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from app.database.core import Base, utcnow

ROLES = ("admin", "edit", "view")


class KubeconfigGrant(Base):
    __tablename__ = "kubeconfig_grants"
    __table_args__ = (
        CheckConstraint("role IN ('admin', 'edit', 'view')", name="role"),
        Index("ix_kubeconfig_grants_cleanup", "secret_deleted_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("virtual_clusters.id"), index=True)
    role: Mapped[str] = mapped_column(String(10))
    service_account: Mapped[str] = mapped_column(String(253))
    secret_name: Mapped[str] = mapped_column(String(253))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]
    revoked_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    # Why it was revoked: user, member-removed, role-changed, tenant-suspended, cluster-deleted.
    revoke_reason: Mapped[str | None] = mapped_column(String(40))
    # Set once the bound Secret is known to be gone from the virtual cluster; until then the
    # worker's kubeconfigs kind retries deleting it for revoked and expired grants.
    secret_deleted_at: Mapped[datetime | None]
