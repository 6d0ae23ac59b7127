"""One row per (kind, key) the worker knows of."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.database.core import Base, utcnow


class WorkItem(Base):
    __tablename__ = "work_items"
    __table_args__ = (Index(None, "due_at"),)

    kind: Mapped[str] = mapped_column(String(40), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    due_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The fenced lease: the claim's token, and until when it holds without a renewal.
    lease_owner: Mapped[str | None] = mapped_column(String(120))
    lease_expires_at: Mapped[datetime | None]
    # Enqueued while held: due again as soon as its holder finishes.
    requeue: Mapped[bool] = mapped_column(default=False)
    # Failures in a row, for the backoff, and the last one's message.
    attempts: Mapped[int] = mapped_column(default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
