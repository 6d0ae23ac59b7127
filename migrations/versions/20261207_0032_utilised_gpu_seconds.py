"""GPU-hours weighted by utilisation (issue 59): how much of a sample's GPUs computed, and each
hour's utilised GPU-seconds

A usage sample of a queue or a dedicated node records ``utilised_gpus``, the sum of its GPUs'
utilisation (``DCGM_FI_DEV_GPU_UTIL`` / 100) read from the operator's Prometheus when it was
taken; NULL when that was unknown (no Prometheus, or fewer GPUs seen than bound), never 0.
Folded hours keep ``utilised_gpu_seconds`` and ``utilisation_known_seconds``, the GPU-seconds
in use that had a figure. Everything sampled before has none.

Revision ID: 0032
Revises: the revision before it (down_revision below)
Create Date: 2026-12-07 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("usage_samples") as table:
        table.add_column(sa.Column("utilised_gpus", sa.Double(), nullable=True))
    with op.batch_alter_table("usage_hourly") as table:
        table.add_column(sa.Column("utilised_gpu_seconds", sa.Double(), nullable=False,
                                   server_default="0"))
        table.add_column(sa.Column("utilisation_known_seconds", sa.Double(), nullable=False,
                                   server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("usage_hourly") as table:
        table.drop_column("utilisation_known_seconds")
        table.drop_column("utilised_gpu_seconds")
    with op.batch_alter_table("usage_samples") as table:
        table.drop_column("utilised_gpus")
