"""Audit events name their target as it was called then (``target_label``), so the audit log
reads "H100 quota request #1 (demo)" instead of "quota_request 1", also once the target is gone.

Events recorded before this revision keep an empty label; the log shows them by kind and id.
Adding a column with a default touches no row, so the append-only triggers of 0002 stay.

Revision ID: 0023
Revises: 0020
Create Date: 2026-12-02 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "audit_events", sa.Column("target_label", sa.String(300), nullable=False, server_default="")
    )


def downgrade() -> None:
    # SQLite >= 3.35 drops a column in place, so its triggers stay (a batch copy would lose them).
    op.drop_column("audit_events", "target_label")
