"""host clusters as a managed resource (issue 17): credentials kind, state, QPS, health

The existing default host (the one PORTAL_KUBECONFIG or in-cluster config reaches) becomes the
first registered host, bound to the environment's credentials (kind ``env``), so an existing
install reaches the same cluster as before. An install in use (it has tenants) with no host row
yet gets that row now; an empty database gets it at first use, as before (the hosts repository's
``ensure_default_host``), which keeps a fresh database free of rows.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 00:45:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DEFAULT_HOST = "default"


def upgrade() -> None:
    with op.batch_alter_table("host_clusters", schema=None) as batch_op:
        batch_op.add_column(sa.Column("description", sa.String(length=500), nullable=False,
                                      server_default=""))
        batch_op.add_column(sa.Column("credential_kind", sa.String(length=20), nullable=False,
                                      server_default="env"))
        batch_op.add_column(sa.Column("credentials_set_at", sa.DateTime(timezone=True),
                                      nullable=True))
        batch_op.add_column(sa.Column("state", sa.String(length=20), nullable=False,
                                      server_default="active"))
        batch_op.add_column(sa.Column("kube_qps", sa.Double(), nullable=True))
        batch_op.add_column(sa.Column("kube_burst", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("health_reachable", sa.Boolean(), nullable=True))
        batch_op.add_column(sa.Column("health_checks", sa.JSON(), nullable=False,
                                      server_default=sa.text("'[]'")))
        batch_op.add_column(sa.Column("health_checked_at", sa.DateTime(timezone=True),
                                      nullable=True))
        batch_op.add_column(sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True))
    _register_the_environments_host()
    with op.batch_alter_table("host_clusters", schema=None) as batch_op:
        # The models have no server defaults: defaults live in Python, like every column.
        for column in ("description", "credential_kind", "state", "health_checks"):
            batch_op.alter_column(column, server_default=None)
        batch_op.alter_column("updated_at", existing_type=sa.DateTime(timezone=True),
                              nullable=False)
        batch_op.create_check_constraint(
            op.f("ck_host_clusters_credential_kind_known"), "credential_kind IN ('kubeconfig', 'token', 'env')")
        batch_op.create_check_constraint(
            op.f("ck_host_clusters_state_known"), "state IN ('active', 'cordoned', 'draining')")


def _register_the_environments_host() -> None:
    """Rows before this revision had no stored credentials: all reached the environment's
    host. The default one (or, with none marked, the oldest) stays the default."""
    connection = op.get_bind()
    now = datetime.now(UTC)
    connection.execute(sa.text("UPDATE host_clusters SET updated_at = created_at"))
    connection.execute(sa.text(
        "UPDATE host_clusters SET credential_kind = 'kubeconfig' "
        "WHERE credentials_encrypted IS NOT NULL"))
    default_id = connection.scalar(sa.text(
        "SELECT id FROM host_clusters WHERE is_default ORDER BY id LIMIT 1"))
    if default_id is None:
        default_id = connection.scalar(sa.text("SELECT min(id) FROM host_clusters"))
        if default_id is not None:
            connection.execute(sa.text("UPDATE host_clusters SET is_default = true "
                                       "WHERE id = :id").bindparams(id=default_id))
    if default_id is None:
        if not connection.scalar(sa.text("SELECT count(*) FROM tenants")):
            return
        connection.execute(sa.text(
            "INSERT INTO host_clusters (name, region, description, api_endpoint, "
            "credential_kind, is_default, state, health_checks, created_at, updated_at) "
            "VALUES (:name, '', '', '', 'env', true, 'active', '[]', :now, :now)")
            .bindparams(name=DEFAULT_HOST, now=now))
        return
    connection.execute(sa.text(
        "UPDATE host_clusters SET credential_kind = 'env', credentials_encrypted = NULL "
        "WHERE id = :id").bindparams(id=default_id))


def downgrade() -> None:
    with op.batch_alter_table("host_clusters", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_host_clusters_state_known"), type_="check")
        batch_op.drop_constraint(op.f("ck_host_clusters_credential_kind_known"),
                                 type_="check")
        for column in ("updated_at", "health_checked_at", "health_checks", "health_reachable",
                       "kube_burst", "kube_qps", "state", "credentials_set_at",
                       "credential_kind", "description"):
            batch_op.drop_column(column)
