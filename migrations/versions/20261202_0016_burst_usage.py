"""Guaranteed and burst GPUs in use (issue 27)

KAI lends a leaf queue idle GPUs beyond its quota (burst) and takes them back when another
queue needs its guarantee. ``usage_samples.burst_gpus`` is a queue sample's allocation beyond
the queue's own quota, ``usage_hourly.burst_gpu_seconds`` its integral over the hour (as
``used_gpu_seconds``); ``quota_gpus_in_use.burst_gpus`` the burst part of a tenant's GPUs in
use on a host; ``cluster_gpus_in_use`` each cluster's guaranteed and burst GPUs in use. Earlier
samples and hours had no burst to count (leaf queues' limit was their quota): 0.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 14:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("usage_samples") as table:
        table.add_column(sa.Column("burst_gpus", sa.Double(), nullable=False,
                                   server_default="0"))
    with op.batch_alter_table("usage_hourly") as table:
        table.add_column(sa.Column("burst_gpu_seconds", sa.Double(), nullable=False,
                                   server_default="0"))
    with op.batch_alter_table("quota_gpus_in_use") as table:
        table.add_column(sa.Column("burst_gpus", sa.Double(), nullable=False,
                                   server_default="0"))
    op.create_table(
        "cluster_gpus_in_use",
        sa.Column("cluster_id", sa.Integer(), nullable=False),
        sa.Column("guaranteed_gpus", sa.Double(), nullable=False),
        sa.Column("burst_gpus", sa.Double(), nullable=False),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("guaranteed_gpus >= 0 AND burst_gpus >= 0",
                           name=op.f("ck_cluster_gpus_in_use_gpus_non_negative")),
        sa.ForeignKeyConstraint(["cluster_id"], ["virtual_clusters.id"], ondelete="CASCADE",
                                name=op.f("fk_cluster_gpus_in_use_cluster_id_virtual_clusters")),
        sa.PrimaryKeyConstraint("cluster_id", name=op.f("pk_cluster_gpus_in_use")),
    )


def downgrade() -> None:
    op.drop_table("cluster_gpus_in_use")
    with op.batch_alter_table("quota_gpus_in_use") as table:
        table.drop_column("burst_gpus")
    with op.batch_alter_table("usage_hourly") as table:
        table.drop_column("burst_gpu_seconds")
    with op.batch_alter_table("usage_samples") as table:
        table.drop_column("burst_gpus")
