"""The usage ledger records a cluster's placement, so that reports can tell the GPU-hours of
shared-pool clusters (which, with dedicated nodes, the approved quota bounds) from those of
dedicated-nodes clusters (which run on the dedicated nodes). Entries of clusters that still
exist get their placement; those of clusters gone before stay unknown (NULL), counted with the
shared pool.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-06 06:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("usage_ledger") as batch:
        batch.add_column(sa.Column("placement", sa.String(20), nullable=True))
    op.execute("UPDATE usage_ledger SET placement = (SELECT placement FROM virtual_clusters "
               "WHERE virtual_clusters.id = usage_ledger.cluster_id) "
               "WHERE kind = 'cluster' AND cluster_id IS NOT NULL")


def downgrade() -> None:
    with op.batch_alter_table("usage_ledger") as batch:
        batch.drop_column("placement")
