"""add-ons a cluster should have, copied from its template version (issue 16, item 2)

Each cluster row carries the add-ons its template version fixes, with the Helm values the
templates domain built for them, so that the cluster reconciler installs them without reading
templates. Clusters made before this migration get their version's add-ons with no values
(versions before it had no add-on settings).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30 23:10:00
"""

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("virtual_clusters", schema=None) as batch_op:
        batch_op.add_column(sa.Column("addons", sa.JSON(), nullable=False,
                                      server_default=sa.text("'[]'")))
    with op.batch_alter_table("virtual_clusters", schema=None) as batch_op:
        # The models have no server default: the default lives in Python, like every column.
        batch_op.alter_column("addons", server_default=None)
    _copy_template_addons()


def _copy_template_addons() -> None:
    connection = op.get_bind()
    rows = connection.execute(sa.text(
        "SELECT c.id, v.addons FROM virtual_clusters c "
        "JOIN cluster_template_versions v ON v.id = c.template_version_id")).all()
    for cluster_id, addons in rows:
        stored = json.loads(addons) if isinstance(addons, str) else addons or []
        if not stored:
            continue
        wanted = [{**addon, "values": {}} for addon in stored]
        connection.execute(sa.text("UPDATE virtual_clusters SET addons = :addons WHERE id = :id")
                           .bindparams(sa.bindparam("addons", type_=sa.JSON()),
                                       addons=wanted, id=cluster_id))


def downgrade() -> None:
    with op.batch_alter_table("virtual_clusters", schema=None) as batch_op:
        batch_op.drop_column("addons")
