"""Burst policies: how a tenant may use idle GPUs beyond its guarantee, and how soon KAI may
take them back (its tier, and what a platform admin set apart from it); and the pods KAI took
back (gpu_reclaims), once per event KAI recorded.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "burst_policies",
        sa.Column("tenant_id", sa.Integer(),
                  sa.ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("tier", sa.String(30), nullable=False),
        sa.Column("burst_gpus", sa.Integer(), nullable=True),
        sa.Column("over_quota_weight", sa.Integer(), nullable=True),
        sa.Column("reclaim_min_runtime_s", sa.Integer(), nullable=True),
        sa.Column("preempt_min_runtime_s", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("burst_gpus IS NULL OR burst_gpus >= -1", name="burst_gpus"),
        sa.CheckConstraint("over_quota_weight IS NULL OR over_quota_weight >= 0",
                           name="weight"),
        sa.CheckConstraint("reclaim_min_runtime_s IS NULL OR reclaim_min_runtime_s >= 0",
                           name="reclaim_min_runtime"),
        sa.CheckConstraint("preempt_min_runtime_s IS NULL OR preempt_min_runtime_s >= 0",
                           name="preempt_min_runtime"),
    )


    op.create_table(
        "gpu_reclaims",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("event_uid", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.Integer(),
                  sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("cluster_id", sa.Integer(),
                  sa.ForeignKey("virtual_clusters.id", ondelete="CASCADE"), nullable=False),
        sa.Column("pod", sa.String(253), nullable=False),
        sa.Column("action", sa.String(20), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("event_uid", name="uq_gpu_reclaims_event_uid"),
    )
    op.create_index("ix_gpu_reclaims_cluster_id_id", "gpu_reclaims", ["cluster_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_gpu_reclaims_cluster_id_id", "gpu_reclaims")
    op.drop_table("gpu_reclaims")
    op.drop_table("burst_policies")
