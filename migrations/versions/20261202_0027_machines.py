"""bare-metal GPU machines (issue 32): registered by their BMC, driven through Metal3

A machine is kept as a BareMetalHost on its host cluster; its BMC credentials are sealed like a
host's, and only the id of the bootstrap token minted for its join is kept.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-02 20:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "machines",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("host_cluster_id", sa.Integer(), nullable=False),
        sa.Column("bmc_address", sa.String(length=500), nullable=False),
        sa.Column("bmc_credentials_encrypted", sa.String(), nullable=False),
        sa.Column("bmc_credentials_set_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("boot_mac", sa.String(length=17), nullable=False),
        sa.Column("gpu_class_id", sa.Integer(), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("rack", sa.String(length=63), nullable=False),
        sa.Column("desired", sa.String(length=20), nullable=False),
        sa.Column("deleting_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("phase", sa.String(length=20), nullable=False),
        sa.Column("reason", sa.String(length=1000), nullable=False),
        sa.Column("provisioning_state", sa.String(length=40), nullable=False),
        sa.Column("node_name", sa.String(length=253), nullable=True),
        sa.Column("bootstrap_token_id", sa.String(length=6), nullable=True),
        sa.Column("bootstrap_token_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("observed_generation", sa.Integer(), nullable=False),
        sa.Column("conditions", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("desired IN ('pool', 'provisioned')",
                           name=op.f("ck_machines_desired_known")),
        sa.CheckConstraint("phase IN ('registering', 'inspecting', 'available', 'provisioning', "
                           "'joined', 'deprovisioning', 'failed')",
                           name=op.f("ck_machines_phase_known")),
        sa.CheckConstraint("gpu_count >= 0", name=op.f("ck_machines_gpu_count_non_negative")),
        sa.CheckConstraint("generation >= 1", name=op.f("ck_machines_generation_positive")),
        sa.ForeignKeyConstraint(["host_cluster_id"], ["host_clusters.id"],
                                name=op.f("fk_machines_host_cluster_id_host_clusters")),
        sa.ForeignKeyConstraint(["gpu_class_id"], ["gpu_classes.id"],
                                name=op.f("fk_machines_gpu_class_id_gpu_classes")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_machines")),
        sa.UniqueConstraint("name", name=op.f("uq_machines_name")),
    )
    op.create_index(op.f("ix_machines_host_cluster_id"), "machines", ["host_cluster_id"])
    op.create_index(op.f("ix_machines_gpu_class_id"), "machines", ["gpu_class_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_machines_gpu_class_id"), table_name="machines")
    op.drop_index(op.f("ix_machines_host_cluster_id"), table_name="machines")
    op.drop_table("machines")
