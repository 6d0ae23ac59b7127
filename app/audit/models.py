"""The append-only audit trail."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String, func
from sqlalchemy.orm import Mapped, mapped_column

from app.database.core import Base, utcnow


class AuditEvent(Base):
    __tablename__ = "audit_events"
    __table_args__ = (
        Index(None, "tenant_id", "occurred_at"),
        Index(None, "occurred_at"),
        # The log's filters, each with the newest-first order by id.
        Index("ix_audit_events_tenant_id_id", "tenant_id", "id"),
        Index("ix_audit_events_action_id", "action", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    occurred_at: Mapped[datetime] = mapped_column(default=utcnow)
    actor_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    actor_label: Mapped[str] = mapped_column(String(320), default="")
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id"))
    action: Mapped[str] = mapped_column(String(100))
    target_type: Mapped[str] = mapped_column(String(50), default="")
    target_id: Mapped[str] = mapped_column(String(255), default="")
    # What the target was called when the event happened: it reads well after a rename or a
    # deletion, and a listed page needs no lookup per kind of target.
    target_label: Mapped[str] = mapped_column(String(300), default="", server_default="")
    before: Mapped[dict[str, Any] | None]
    after: Mapped[dict[str, Any] | None]
    request_id: Mapped[str] = mapped_column(String(64), default="")


# The actor filter compares emails in any case.
Index("ix_audit_events_actor_id", func.lower(AuditEvent.actor_label), AuditEvent.id)
