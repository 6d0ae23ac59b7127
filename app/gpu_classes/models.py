"""GPU classes: the products quota is counted in."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, String
from sqlalchemy.orm import Mapped, mapped_column

from app.database.core import Base, utcnow


class GpuClass(Base):
    """A GPU product as GPU Feature Discovery labels it (``nvidia.com/gpu.product``)."""

    __tablename__ = "gpu_classes"
    __table_args__ = (CheckConstraint("memory_mib >= 0", name="memory_non_negative"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    product: Mapped[str] = mapped_column(String(200), unique=True)
    display_name: Mapped[str] = mapped_column(String(100))
    memory_mib: Mapped[int] = mapped_column(default=0)
    gpus_per_node: Mapped[int | None]
    declared_by_admin: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
