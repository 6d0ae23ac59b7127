"""template validation runs in the worker (issue 16): a requested validation waits in the row

``validation_requested_at`` is set when an admin asks for a validation and cleared when the
worker stores its result; ``validation_lease_until`` keeps one worker on one validation.

Revision ID: 0011
Revises: 0008
Create Date: 2026-12-01 00:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("cluster_template_versions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("validation_requested_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("validation_lease_until", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index("ix_cluster_template_versions_validation_requested_at",
                              ["validation_requested_at"])


def downgrade() -> None:
    with op.batch_alter_table("cluster_template_versions", schema=None) as batch_op:
        batch_op.drop_index("ix_cluster_template_versions_validation_requested_at")
        batch_op.drop_column("validation_lease_until")
        batch_op.drop_column("validation_requested_at")
