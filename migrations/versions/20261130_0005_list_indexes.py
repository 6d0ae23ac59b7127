"""indexes for every filter and order of the lists (issue 11)

Each list pages by a keyset on its order, so an index leading with the filter's columns and
ending with the order's lets the database read one page and stop. Single-column indexes that a
new one starts with are dropped.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.create_index("ix_nodes_host_rack_name", ["host_cluster_id", "rack", "name"])
        batch_op.create_index("ix_nodes_host_zone_name", ["host_cluster_id", "zone", "name"])
        batch_op.create_index("ix_nodes_host_ready_name", ["host_cluster_id", "ready", "name"])
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_events_action")
        batch_op.create_index("ix_audit_events_action_id", ["action", "id"])
        batch_op.create_index("ix_audit_events_tenant_id_id", ["tenant_id", "id"])
    op.create_index("ix_audit_events_actor_id", "audit_events",
                    [sa.text("lower(actor_label)"), "id"])
    with op.batch_alter_table("quota_requests", schema=None) as batch_op:
        batch_op.drop_index("ix_quota_requests_state_quota_requests_created_at")
        batch_op.drop_index("ix_quota_requests_tenant_id")
        batch_op.create_index("ix_quota_requests_state_id", ["state", "id"])
        batch_op.create_index("ix_quota_requests_tenant_id_id", ["tenant_id", "id"])
    with op.batch_alter_table("virtual_clusters", schema=None) as batch_op:
        batch_op.drop_index("ix_virtual_clusters_tenant_id")
        batch_op.create_index("ix_virtual_clusters_tenant_id_id", ["tenant_id", "id"])


def downgrade() -> None:
    with op.batch_alter_table("virtual_clusters", schema=None) as batch_op:
        batch_op.drop_index("ix_virtual_clusters_tenant_id_id")
        batch_op.create_index("ix_virtual_clusters_tenant_id", ["tenant_id"])
    with op.batch_alter_table("quota_requests", schema=None) as batch_op:
        batch_op.drop_index("ix_quota_requests_tenant_id_id")
        batch_op.drop_index("ix_quota_requests_state_id")
        batch_op.create_index("ix_quota_requests_tenant_id", ["tenant_id"])
        batch_op.create_index("ix_quota_requests_state_quota_requests_created_at",
                              ["state", "created_at"])
    op.drop_index("ix_audit_events_actor_id", table_name="audit_events")
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_events_tenant_id_id")
        batch_op.drop_index("ix_audit_events_action_id")
        batch_op.create_index("ix_audit_events_action", ["action"])
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_index("ix_nodes_host_ready_name")
        batch_op.drop_index("ix_nodes_host_zone_name")
        batch_op.drop_index("ix_nodes_host_rack_name")
