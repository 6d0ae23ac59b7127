"""The GPU classes a cluster create names, kept briefly (``app.database.kept``).

Classes are few, never deleted, and their product never changes; what may lag, by up to
``MAX_AGE_SECONDS`` after another process changed it, is a display name in a create's
placement reason and audit event. A class this process has not seen yet is read at once.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.database.kept import Kept
from app.gpu_classes.models import GpuClass

MAX_AGE_SECONDS = 2.0
_COLUMNS = (GpuClass.id, GpuClass.product, GpuClass.display_name, GpuClass.memory_mib,
            GpuClass.gpus_per_node, GpuClass.declared_by_admin, GpuClass.created_at)


def _every_class(db: Session) -> dict[int, dict[str, Any]]:
    return {row.id: row._asdict() for row in db.execute(select(*_COLUMNS))}


_kept = Kept("gpu_classes", (GpuClass,), _every_class, MAX_AGE_SECONDS)


def gpu_class(db: Session, gpu_class_id: int) -> GpuClass | None:
    """The class as a detached copy (not in the session; read it, never change it)."""
    fields = _kept.get(db).get(gpu_class_id)
    if fields is None:
        return db.get(GpuClass, gpu_class_id)
    return GpuClass(**fields)
