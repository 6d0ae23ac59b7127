"""Kubeconfig grants. The token itself is never stored."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, utcnow


class KubeconfigGrant(Base):
    __tablename__ = "kubeconfig_grants"
    __table_args__ = (CheckConstraint("role IN ('admin', 'edit', 'view')", name="role"),)

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
