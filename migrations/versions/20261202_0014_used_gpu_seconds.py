"""GPU-seconds in use to the minute: how long a usage sample stands, and each hour's integral

A sample says what was bound when it was taken; it now stands until the next sample of the
same subject, at most ``holds_s`` (twice the worker's resync when it was taken). Folded hours
keep that integral (``used_gpu_seconds``) instead of a mean stretched over the whole hour,
which counted a cluster made at 10:55 as busy since 10:00. Hours folded before keep what they
counted (their mean times an hour).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("usage_samples") as table:
        table.add_column(sa.Column("holds_s", sa.Integer(), nullable=False,
                                   server_default="600"))
    with op.batch_alter_table("usage_hourly") as table:
        table.add_column(sa.Column("used_gpu_seconds", sa.Double(), nullable=False,
                                   server_default="0"))
    op.execute("UPDATE usage_hourly SET used_gpu_seconds = mean_used_gpus * 3600")


def downgrade() -> None:
    with op.batch_alter_table("usage_hourly") as table:
        table.drop_column("used_gpu_seconds")
    with op.batch_alter_table("usage_samples") as table:
        table.drop_column("holds_s")
