"""GPU classes: the products quota is counted in."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, String
from sqlalchemy.orm import Mapped, mapped_column

from app.database.core import Base, utcnow


class GpuClass(Base):
    """A GPU product as GPU Feature Discovery labels it (``nvidia.com/gpu.product``)."""

    __tablename__ = "gpu_classes"
    __table_args__ = (
        CheckConstraint("memory_mib >= 0", name="memory_non_negative"),
        CheckConstraint("share_step IS NULL OR (share_step BETWEEN 1 AND 100 "
                        "AND 100 % share_step = 0)", name="share_step"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    product: Mapped[str] = mapped_column(String(200), unique=True)
    display_name: Mapped[str] = mapped_column(String(100))
    memory_mib: Mapped[int] = mapped_column(default=0)
    gpus_per_node: Mapped[int | None]
    declared_by_admin: Mapped[bool] = mapped_column(default=False)
    # KAI GPU sharing of this class, the operator's opt-in: a share is asked for in steps of
    # this many hundredths of one GPU (25: 0.25, 0.5, 0.75, 1). None: not shared.
    share_step: Mapped[int | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
