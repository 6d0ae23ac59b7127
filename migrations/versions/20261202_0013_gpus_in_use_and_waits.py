"""GPUs bound now and pods waiting for them, as the worker reads them from KAI (issue 25)

``quota_gpus_in_use``: per tenant, GPU class and host, the GPUs bound to the tenant's pods
there (KAI's queue allocation plus pods on its dedicated nodes): the quota's "in use".
``cluster_gpu_waits``: per virtual cluster, its GPU pods that KAI has not bound and KAI's
reason. Both are rewritten on each usage pass; nothing to backfill.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "quota_gpus_in_use",
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("gpu_class_id", sa.Integer(), nullable=False),
        sa.Column("host_cluster_id", sa.Integer(), nullable=False),
        sa.Column("gpus", sa.Double(), nullable=False),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("gpus >= 0", name=op.f("ck_quota_gpus_in_use_gpus_non_negative")),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE",
                                name=op.f("fk_quota_gpus_in_use_tenant_id_tenants")),
        sa.ForeignKeyConstraint(["gpu_class_id"], ["gpu_classes.id"], ondelete="CASCADE",
                                name=op.f("fk_quota_gpus_in_use_gpu_class_id_gpu_classes")),
        sa.ForeignKeyConstraint(
            ["host_cluster_id"], ["host_clusters.id"], ondelete="CASCADE",
            name=op.f("fk_quota_gpus_in_use_host_cluster_id_host_clusters")),
        sa.PrimaryKeyConstraint("tenant_id", "gpu_class_id", "host_cluster_id",
                                name=op.f("pk_quota_gpus_in_use")),
    )
    op.create_table(
        "cluster_gpu_waits",
        sa.Column("cluster_id", sa.Integer(), nullable=False),
        sa.Column("pods", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("pods >= 0", name=op.f("ck_cluster_gpu_waits_pods_non_negative")),
        sa.ForeignKeyConstraint(["cluster_id"], ["virtual_clusters.id"], ondelete="CASCADE",
                                name=op.f("fk_cluster_gpu_waits_cluster_id_virtual_clusters")),
        sa.PrimaryKeyConstraint("cluster_id", name=op.f("pk_cluster_gpu_waits")),
    )


def downgrade() -> None:
    op.drop_table("cluster_gpu_waits")
    op.drop_table("quota_gpus_in_use")
