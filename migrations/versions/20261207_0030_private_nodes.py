"""private nodes (issue 57): a cluster placement whose GPUs are whole machines joined to the
virtual cluster itself; a machine serves at most one cluster (``machines.cluster_id``), set
when it is assigned and cleared once it is back in the pool, wiped.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-07 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PLACEMENTS_BEFORE = "placement IN ('shared-pool', 'dedicated-nodes')"
PLACEMENTS = "placement IN ('shared-pool', 'dedicated-nodes', 'private-nodes')"
DESIRED_BEFORE = "desired IN ('pool', 'provisioned')"
DESIRED = "desired IN ('pool', 'provisioned', 'private')"
PRIVATE_HAS_CLUSTER = "desired <> 'private' OR cluster_id IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("virtual_clusters", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("ck_virtual_clusters_placement"), type_="check")
        batch_op.create_check_constraint(batch_op.f("ck_virtual_clusters_placement"),
                                         PLACEMENTS)
    with op.batch_alter_table("machines", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cluster_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("assigned_at", sa.DateTime(timezone=True),
                                      nullable=True))
        batch_op.create_foreign_key(batch_op.f("fk_machines_cluster_id_virtual_clusters"),
                                    "virtual_clusters", ["cluster_id"], ["id"])
        batch_op.create_index(batch_op.f("ix_machines_cluster_id"), ["cluster_id"])
        batch_op.drop_constraint(batch_op.f("ck_machines_desired_known"), type_="check")
        batch_op.create_check_constraint(batch_op.f("ck_machines_desired_known"), DESIRED)
        batch_op.create_check_constraint(batch_op.f("ck_machines_private_has_cluster"),
                                         PRIVATE_HAS_CLUSTER)


def downgrade() -> None:
    # Private machines go back to the pool (the worker deprovisions them), private-nodes
    # clusters cannot be kept: refuse rather than lose them silently.
    connection = op.get_bind()
    kept = connection.execute(sa.text(
        "SELECT count(*) FROM virtual_clusters WHERE placement = 'private-nodes'")).scalar_one()
    if kept:
        raise RuntimeError(f"{kept} private-nodes clusters exist: delete them before "
                           "downgrading below revision 0030")
    op.execute("UPDATE machines SET desired = 'pool' WHERE desired = 'private'")
    with op.batch_alter_table("machines", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("ck_machines_private_has_cluster"), type_="check")
        batch_op.drop_constraint(batch_op.f("ck_machines_desired_known"), type_="check")
        batch_op.create_check_constraint(batch_op.f("ck_machines_desired_known"),
                                         DESIRED_BEFORE)
        batch_op.drop_index(batch_op.f("ix_machines_cluster_id"))
        batch_op.drop_constraint(batch_op.f("fk_machines_cluster_id_virtual_clusters"),
                                 type_="foreignkey")
        batch_op.drop_column("assigned_at")
        batch_op.drop_column("cluster_id")
    with op.batch_alter_table("virtual_clusters", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("ck_virtual_clusters_placement"), type_="check")
        batch_op.create_check_constraint(batch_op.f("ck_virtual_clusters_placement"),
                                         PLACEMENTS_BEFORE)
