"""One work queue for every kind the worker runs

The worker's kinds (clusters, nodes, hosts, the webhook, usage samples, kubeconfig clean-up,
quota expiry, template validation) share one queue of (kind, key) items with a due time and a
fenced lease. The clusters' own lease columns, the template versions' validation lease and the
kubeconfig grants' clean-up backoff go: the queue holds them now (due time, attempts, last
error). Clusters keep their schedule; queued validations and pending clean-ups stay queued.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "work_items",
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lease_owner", sa.String(120)),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True)),
        sa.Column("requeue", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text()),
        sa.PrimaryKeyConstraint("kind", "key", name="pk_work_items"),
    )
    op.create_index("ix_work_items_due_at", "work_items", ["due_at"])
    op.execute("INSERT INTO work_items (kind, key, due_at) SELECT 'clusters', "
               "CAST(id AS VARCHAR(200)), next_reconcile_at FROM virtual_clusters")
    op.execute("INSERT INTO work_items (kind, key, due_at) SELECT 'template-validation', "
               "CAST(id AS VARCHAR(200)), validation_requested_at "
               "FROM cluster_template_versions WHERE validation_requested_at IS NOT NULL")
    with op.batch_alter_table("virtual_clusters") as table:
        table.drop_index("ix_virtual_clusters_host_due")
        table.drop_index("ix_virtual_clusters_next_reconcile_at")
        table.drop_column("lease_owner")
        table.drop_column("lease_expires_at")
        table.drop_column("next_reconcile_at")
    op.execute("INSERT INTO work_items (kind, key, due_at, attempts, last_error) SELECT "
               "'kubeconfigs', CAST(id AS VARCHAR(200)), COALESCE(next_cleanup_at, "
               "CURRENT_TIMESTAMP), cleanup_attempts, cleanup_error FROM kubeconfig_grants "
               "WHERE secret_deleted_at IS NULL AND revoked_at IS NOT NULL")
    with op.batch_alter_table("cluster_template_versions") as table:
        table.drop_column("validation_lease_until")
    with op.batch_alter_table("kubeconfig_grants") as table:
        table.drop_index("ix_kubeconfig_grants_cleanup")
        table.drop_column("cleanup_error")
        table.drop_column("cleanup_attempts")
        table.drop_column("next_cleanup_at")
        table.create_index("ix_kubeconfig_grants_cleanup", ["secret_deleted_at"])


def downgrade() -> None:
    with op.batch_alter_table("kubeconfig_grants") as table:
        table.drop_index("ix_kubeconfig_grants_cleanup")
        table.add_column(sa.Column("next_cleanup_at", sa.DateTime(timezone=True)))
        table.add_column(sa.Column("cleanup_attempts", sa.Integer(), nullable=False,
                                   server_default="0"))
        table.add_column(sa.Column("cleanup_error", sa.String(500)))
        table.create_index("ix_kubeconfig_grants_cleanup",
                           ["secret_deleted_at", "next_cleanup_at"])
    with op.batch_alter_table("cluster_template_versions") as table:
        table.add_column(sa.Column("validation_lease_until", sa.DateTime(timezone=True)))
    with op.batch_alter_table("virtual_clusters") as table:
        table.add_column(sa.Column("next_reconcile_at", sa.DateTime(timezone=True),
                                   nullable=False, server_default=sa.func.now()))
        table.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True)))
        table.add_column(sa.Column("lease_owner", sa.String(100)))
        table.create_index("ix_virtual_clusters_next_reconcile_at", ["next_reconcile_at"])
        table.create_index("ix_virtual_clusters_host_due",
                           ["host_cluster_id", "next_reconcile_at"])
    op.execute("UPDATE virtual_clusters SET next_reconcile_at = COALESCE((SELECT due_at FROM "
               "work_items WHERE kind = 'clusters' AND key = CAST(virtual_clusters.id AS "
               "VARCHAR(200))), CURRENT_TIMESTAMP)")
    op.drop_table("work_items")
