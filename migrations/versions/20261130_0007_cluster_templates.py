"""cluster templates and their versions; every cluster on the built-in "default" template (issue 16)

The "default" template's version 1 reproduces the shape clusters had before templates: every
setting open (the tenant picks placement, GPU class and Kubernetes version), no GPU cap beyond the
quota, the operator's Pod Security level, no user namespaces. It is offered at once: it is what
every existing cluster already runs.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 21:40:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BUILTIN_VALIDATION = {
    "passed": True,
    "checks": [],
    "note": "built in by migration 0007: the shape every cluster had before templates",
}


def upgrade() -> None:
    templates = op.create_table(
        "cluster_templates",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=40), nullable=False),
        sa.Column("description", sa.String(length=500), nullable=False),
        sa.Column("created_by_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["created_by_id"], ["users.id"],
                                name=op.f("fk_cluster_templates_created_by_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cluster_templates")),
        sa.UniqueConstraint("name", name=op.f("uq_cluster_templates_name")),
    )
    versions = op.create_table(
        "cluster_template_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("template_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=10), nullable=False),
        sa.Column("placement", sa.String(length=20), nullable=True),
        sa.Column("kubernetes_version", sa.String(length=20), nullable=True),
        sa.Column("gpu_class_id", sa.Integer(), nullable=True),
        sa.Column("default_gpus", sa.Integer(), nullable=False),
        sa.Column("max_gpus", sa.Integer(), nullable=True),
        sa.Column("pod_security", sa.String(length=10), nullable=True),
        sa.Column("user_namespaces", sa.Boolean(), nullable=False),
        sa.Column("addons", sa.JSON(), nullable=False),
        sa.Column("validation", sa.JSON(), nullable=True),
        sa.Column("validated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("offered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_by_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("state IN ('draft', 'offered', 'retired')",
                           name=op.f("ck_cluster_template_versions_state")),
        sa.CheckConstraint(
            "placement IS NULL OR placement IN ('shared-pool', 'dedicated-nodes')",
            name=op.f("ck_cluster_template_versions_placement")),
        sa.CheckConstraint(
            "pod_security IS NULL OR pod_security IN ('restricted', 'baseline')",
            name=op.f("ck_cluster_template_versions_pod_security")),
        sa.CheckConstraint("default_gpus >= 0",
                           name=op.f("ck_cluster_template_versions_default_gpus_non_negative")),
        sa.CheckConstraint("max_gpus IS NULL OR max_gpus >= default_gpus",
                           name=op.f("ck_cluster_template_versions_max_gpus")),
        sa.ForeignKeyConstraint(["template_id"], ["cluster_templates.id"],
                                name=op.f("fk_cluster_template_versions_template_id_"
                                          "cluster_templates")),
        sa.ForeignKeyConstraint(["gpu_class_id"], ["gpu_classes.id"],
                                name=op.f("fk_cluster_template_versions_gpu_class_id_"
                                          "gpu_classes")),
        sa.ForeignKeyConstraint(["created_by_id"], ["users.id"],
                                name=op.f("fk_cluster_template_versions_created_by_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cluster_template_versions")),
        sa.UniqueConstraint("template_id", "version",
                            name=op.f("uq_cluster_template_versions_template_id_version")),
    )
    with op.batch_alter_table("virtual_clusters", schema=None) as batch_op:
        batch_op.add_column(sa.Column("template_version_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("pod_security", sa.String(length=10), nullable=True))
        batch_op.add_column(sa.Column("user_namespaces", sa.Boolean(), nullable=False,
                                      server_default=sa.false()))
        batch_op.create_foreign_key(
            batch_op.f("fk_virtual_clusters_template_version_id_cluster_template_versions"),
            "cluster_template_versions", ["template_version_id"], ["id"])
        batch_op.create_check_constraint(
            batch_op.f("ck_virtual_clusters_pod_security"),
            "pod_security IS NULL OR pod_security IN ('restricted', 'baseline')")
    with op.batch_alter_table("virtual_clusters", schema=None) as batch_op:
        # The models have no server default: the default lives in Python, like every column.
        batch_op.alter_column("user_namespaces", server_default=None)
    _builtin_default(templates, versions)


def _builtin_default(templates: sa.Table, versions: sa.Table) -> None:
    now = datetime.now(UTC)
    connection = op.get_bind()
    template_id = connection.execute(
        templates.insert().values(
            name="default", created_at=now,
            description="The shape every cluster had before templates: choose placement, "
                        "GPU class and Kubernetes version yourself.",
        ).returning(templates.c.id)).scalar_one()
    version_id = connection.execute(
        versions.insert().values(
            template_id=template_id, version=1, state="offered", default_gpus=0,
            user_namespaces=False, addons=[], validation=BUILTIN_VALIDATION,
            validated_at=now, offered_at=now, created_at=now,
        ).returning(versions.c.id)).scalar_one()
    connection.execute(sa.text("UPDATE virtual_clusters SET template_version_id = :id")
                       .bindparams(id=version_id))


def downgrade() -> None:
    with op.batch_alter_table("virtual_clusters", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("ck_virtual_clusters_pod_security"), type_="check")
        batch_op.drop_constraint(
            batch_op.f("fk_virtual_clusters_template_version_id_cluster_template_versions"),
            type_="foreignkey")
        batch_op.drop_column("user_namespaces")
        batch_op.drop_column("pod_security")
        batch_op.drop_column("template_version_id")
    op.drop_table("cluster_template_versions")
    op.drop_table("cluster_templates")
