"""Sleep policies from templates, and when a warned deletion is due: a template version's
defaults for the sleep policy of the clusters made from it (all null: no default), and a
cluster's deletion_due_at (set when its coming deletion is announced, cleared on waking).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02 16:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TEMPLATE_CHECKS = {
    "idle_minutes_positive": "sleep_after_idle_minutes IS NULL OR sleep_after_idle_minutes > 0",
    "delete_days_positive": "delete_after_sleep_days IS NULL OR delete_after_sleep_days > 0",
}


def upgrade() -> None:
    with op.batch_alter_table("cluster_template_versions") as table:
        table.add_column(sa.Column("never_sleep", sa.Boolean()))
        table.add_column(sa.Column("sleep_after_idle_minutes", sa.Integer()))
        table.add_column(sa.Column("sleep_schedule", sa.String(200)))
        table.add_column(sa.Column("sleep_timezone", sa.String(64)))
        table.add_column(sa.Column("delete_after_sleep_days", sa.Integer()))
        for name, condition in _TEMPLATE_CHECKS.items():
            table.create_check_constraint(name, condition)
    with op.batch_alter_table("virtual_clusters") as table:
        table.add_column(sa.Column("deletion_due_at", sa.DateTime(timezone=True)))


def downgrade() -> None:
    with op.batch_alter_table("virtual_clusters") as table:
        table.drop_column("deletion_due_at")
    with op.batch_alter_table("cluster_template_versions") as table:
        for name in _TEMPLATE_CHECKS:
            table.drop_constraint(name, type_="check")
        for column in ("delete_after_sleep_days", "sleep_timezone", "sleep_schedule",
                       "sleep_after_idle_minutes", "never_sleep"):
            table.drop_column(column)
