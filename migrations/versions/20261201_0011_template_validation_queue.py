"""template validation runs in the worker (issue 16): a requested validation waits in the row

``validation_requested_at`` is set when an admin asks for a validation and cleared when the
worker stores its result; ``validation_lease_until`` keeps one worker on one validation.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 00:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


TABLE = "cluster_template_versions"
INDEX = "ix_cluster_template_versions_validation_requested_at"


# Plain ALTER TABLE, no batch: SQLite's batch mode copies the table and drops the old one, which
# virtual_clusters.template_version_id refers to (foreign keys are on).
def upgrade() -> None:
    op.add_column(TABLE, sa.Column("validation_requested_at", sa.DateTime(timezone=True),
                                   nullable=True))
    op.add_column(TABLE, sa.Column("validation_lease_until", sa.DateTime(timezone=True),
                                   nullable=True))
    op.create_index(INDEX, TABLE, ["validation_requested_at"])


def downgrade() -> None:
    op.drop_index(INDEX, table_name=TABLE)
    op.drop_column(TABLE, "validation_lease_until")
    op.drop_column(TABLE, "validation_requested_at")
