"""quota per GPU class and region; the host a cluster was placed on, and why (issue 17)

Tenant quotas and quota requests name a region. Rows made before get the region of the default
host cluster (the one ``PORTAL_KUBECONFIG`` names; ``''`` when none is registered yet), which is
where every cluster ran until now. A tenant holds one quota row per class and region. Clusters
keep the reason placement gave for their host; those made before were all on the default host.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 01:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EARLIER = "on the default host: every cluster was, before hosts could be chosen"


def upgrade() -> None:
    region = _default_region()
    for table in ("tenant_quotas", "quota_requests"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("region", sa.String(length=63), nullable=False,
                                          server_default=region))
    with op.batch_alter_table("tenant_quotas", schema=None) as batch_op:
        batch_op.drop_constraint("uq_tenant_quotas_tenant_id_gpu_class_id", type_="unique")
        batch_op.create_unique_constraint(
            batch_op.f("uq_tenant_quotas_tenant_id_gpu_class_id_region"),
            ["tenant_id", "gpu_class_id", "region"])
    with op.batch_alter_table("virtual_clusters", schema=None) as batch_op:
        batch_op.add_column(sa.Column("placement_reason", sa.Text(), nullable=False,
                                      server_default=EARLIER))
        batch_op.create_index("ix_virtual_clusters_host_due",
                              ["host_cluster_id", "next_reconcile_at"], unique=False)
    # The models have no server defaults: the defaults live in Python, like every column's.
    for table, column in (("tenant_quotas", "region"), ("quota_requests", "region"),
                          ("virtual_clusters", "placement_reason")):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column(column, server_default=None)


def _default_region() -> str:
    found = op.get_bind().execute(sa.text(
        "SELECT region FROM host_clusters ORDER BY is_default DESC, id LIMIT 1")).scalar()
    return str(found or "")


def downgrade() -> None:
    # Quota rows of one class in several regions become one row again, summed.
    connection = op.get_bind()
    rows = connection.execute(sa.text(
        "SELECT tenant_id, gpu_class_id, SUM(gpus), SUM(cpu_millicores), SUM(memory_mib), "
        "MIN(id) FROM tenant_quotas GROUP BY tenant_id, gpu_class_id HAVING COUNT(*) > 1")).all()
    for tenant_id, class_id, gpus, cpu, memory, keep in rows:
        connection.execute(sa.text(
            "DELETE FROM tenant_quotas WHERE tenant_id = :t AND gpu_class_id = :c AND id <> :k"),
            {"t": tenant_id, "c": class_id, "k": keep})
        connection.execute(sa.text(
            "UPDATE tenant_quotas SET gpus = :g, cpu_millicores = :cpu, memory_mib = :m "
            "WHERE id = :k"), {"g": gpus, "cpu": cpu, "m": memory, "k": keep})
    with op.batch_alter_table("virtual_clusters", schema=None) as batch_op:
        batch_op.drop_index("ix_virtual_clusters_host_due")
        batch_op.drop_column("placement_reason")
    with op.batch_alter_table("tenant_quotas", schema=None) as batch_op:
        batch_op.drop_constraint("uq_tenant_quotas_tenant_id_gpu_class_id_region", type_="unique")
        batch_op.create_unique_constraint("uq_tenant_quotas_tenant_id_gpu_class_id",
                                          ["tenant_id", "gpu_class_id"])
    for table in ("tenant_quotas", "quota_requests"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("region")
