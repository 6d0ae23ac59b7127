"""Placement sums the shared pool's GPUs of a class per host at every cluster create: an index
of those clusters' class, host and GPUs answers it without reading the table.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-02 19:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SHARED_POOL = sa.text("placement = 'shared-pool'")


def upgrade() -> None:
    op.create_index("ix_virtual_clusters_shared_pool_gpus", "virtual_clusters",
                    ["gpu_class_id", "host_cluster_id"], postgresql_include=["gpus"],
                    postgresql_where=SHARED_POOL, sqlite_where=SHARED_POOL)


def downgrade() -> None:
    op.drop_index("ix_virtual_clusters_shared_pool_gpus", table_name="virtual_clusters")
