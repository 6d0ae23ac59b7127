"""Sleep policy idle on utilisation: what "idle" means for a cluster's idle minutes, no GPU pod
bound (``bound``, as before) or also GPUs bound but below the idle threshold
(``utilisation``); every existing cluster keeps ``bound``. A template version's default for
the clusters made from it (null: none, ``bound``).

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-07 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MEASURES = "idle_measure IN ('bound', 'utilisation')"
TEMPLATE_MEASURES = "idle_measure IS NULL OR idle_measure IN ('bound', 'utilisation')"


def upgrade() -> None:
    with op.batch_alter_table("virtual_clusters") as table:
        table.add_column(sa.Column("idle_measure", sa.String(12), nullable=False,
                                   server_default="bound"))
        table.create_check_constraint("idle_measure", MEASURES)
    with op.batch_alter_table("cluster_template_versions") as table:
        table.add_column(sa.Column("idle_measure", sa.String(12)))
        table.create_check_constraint("idle_measure", TEMPLATE_MEASURES)


def downgrade() -> None:
    with op.batch_alter_table("cluster_template_versions") as table:
        table.drop_constraint("idle_measure", type_="check")
        table.drop_column("idle_measure")
    with op.batch_alter_table("virtual_clusters") as table:
        table.drop_constraint("idle_measure", type_="check")
        table.drop_column("idle_measure")
