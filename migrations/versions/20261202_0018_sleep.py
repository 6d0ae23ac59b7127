"""Sleep and wake: a cluster's wanted power (awake or asleep), why and since when; when it
went to sleep; its sleep policy (never, after idle minutes, on a schedule in a time zone,
deletion after days asleep and when that was warned).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02 14:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("virtual_clusters") as table:
        table.add_column(sa.Column("power", sa.String(10), nullable=False,
                                   server_default="awake"))
        table.add_column(sa.Column("power_reason", sa.String(20), nullable=False,
                                   server_default=""))
        table.add_column(sa.Column("power_changed_at", sa.DateTime(timezone=True)))
        table.add_column(sa.Column("asleep_since", sa.DateTime(timezone=True)))
        table.add_column(sa.Column("never_sleep", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
        table.add_column(sa.Column("sleep_after_idle_minutes", sa.Integer()))
        table.add_column(sa.Column("sleep_schedule", sa.String(200)))
        table.add_column(sa.Column("sleep_timezone", sa.String(64), nullable=False,
                                   server_default="UTC"))
        table.add_column(sa.Column("delete_after_sleep_days", sa.Integer()))
        table.add_column(sa.Column("deletion_warned_at", sa.DateTime(timezone=True)))
        table.create_check_constraint("power", "power IN ('awake', 'asleep')")
        table.create_check_constraint(
            "idle_minutes_positive",
            "sleep_after_idle_minutes IS NULL OR sleep_after_idle_minutes > 0")
        table.create_check_constraint(
            "delete_days_positive",
            "delete_after_sleep_days IS NULL OR delete_after_sleep_days > 0")


def downgrade() -> None:
    with op.batch_alter_table("virtual_clusters") as table:
        for name in ("delete_days_positive", "idle_minutes_positive", "power"):
            table.drop_constraint(name, type_="check")
        for column in ("deletion_warned_at", "delete_after_sleep_days", "sleep_timezone",
                       "sleep_schedule", "sleep_after_idle_minutes", "never_sleep",
                       "asleep_since", "power_changed_at", "power_reason", "power"):
            table.drop_column(column)
