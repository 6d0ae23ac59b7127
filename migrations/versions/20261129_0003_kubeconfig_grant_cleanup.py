"""kubeconfig grants: revoke reason and the bound Secret's cleanup state

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 16:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("kubeconfig_grants", schema=None) as batch_op:
        batch_op.add_column(sa.Column("revoke_reason", sa.String(length=40), nullable=True))
        batch_op.add_column(
            sa.Column("secret_deleted_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(
            sa.Column("next_cleanup_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(
            sa.Column("cleanup_attempts", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("cleanup_error", sa.String(length=500), nullable=True))
        batch_op.create_index(
            "ix_kubeconfig_grants_cleanup", ["secret_deleted_at", "next_cleanup_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("kubeconfig_grants", schema=None) as batch_op:
        batch_op.drop_index("ix_kubeconfig_grants_cleanup")
        batch_op.drop_column("cleanup_error")
        batch_op.drop_column("cleanup_attempts")
        batch_op.drop_column("next_cleanup_at")
        batch_op.drop_column("secret_deleted_at")
        batch_op.drop_column("revoke_reason")
