"""GPU usage: the append-only allocation ledger, raw and hourly use samples (issue 15)

The ledger is protected like the audit trail: the database refuses UPDATE and DELETE.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 21:20:53
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('usage_hourly',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('hour_s', sa.BigInteger(), nullable=False),
    sa.Column('source', sa.String(length=10), nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=False),
    sa.Column('gpu_class_id', sa.Integer(), nullable=True),
    sa.Column('subject_id', sa.Integer(), nullable=False),
    sa.Column('samples', sa.Integer(), nullable=False),
    sa.Column('mean_used_gpus', sa.Double(), nullable=False),
    sa.Column('peak_used_gpus', sa.Double(), nullable=False),
    sa.Column('mean_allocated_gpus', sa.Double(), nullable=False),
    sa.Column('mean_requested_gpus', sa.Double(), nullable=False),
    sa.CheckConstraint("source IN ('queue', 'quota', 'node')", name=op.f('ck_usage_hourly_source')),
    sa.CheckConstraint('samples > 0', name=op.f('ck_usage_hourly_samples_positive')),
    sa.ForeignKeyConstraint(['gpu_class_id'], ['gpu_classes.id'], name=op.f('fk_usage_hourly_gpu_class_id_gpu_classes')),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], name=op.f('fk_usage_hourly_tenant_id_tenants')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_usage_hourly')),
    sa.UniqueConstraint('source', 'subject_id', 'tenant_id', 'hour_s',
                        name=op.f('uq_usage_hourly_source_subject_id_tenant_id_hour_s'))
    )
    with op.batch_alter_table('usage_hourly', schema=None) as batch_op:
        batch_op.create_index('ix_usage_hourly_hour_s', ['hour_s'], unique=False)
        batch_op.create_index('ix_usage_hourly_tenant_id_hour_s', ['tenant_id', 'hour_s'], unique=False)

    op.create_table('usage_ledger',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('at_s', sa.BigInteger(), nullable=False),
    sa.Column('kind', sa.String(length=10), nullable=False),
    sa.Column('subject_id', sa.Integer(), nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=False),
    sa.Column('gpu_class_id', sa.Integer(), nullable=False),
    sa.Column('cluster_id', sa.Integer(), nullable=True),
    sa.Column('cluster_name', sa.String(length=40), nullable=False),
    sa.Column('node_id', sa.Integer(), nullable=True),
    sa.Column('gpus', sa.Integer(), nullable=False),
    sa.CheckConstraint("kind IN ('quota', 'cluster', 'node')", name=op.f('ck_usage_ledger_kind')),
    sa.CheckConstraint('gpus >= 0', name=op.f('ck_usage_ledger_gpus_non_negative')),
    sa.ForeignKeyConstraint(['gpu_class_id'], ['gpu_classes.id'], name=op.f('fk_usage_ledger_gpu_class_id_gpu_classes')),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], name=op.f('fk_usage_ledger_tenant_id_tenants')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_usage_ledger'))
    )
    with op.batch_alter_table('usage_ledger', schema=None) as batch_op:
        batch_op.create_index('ix_usage_ledger_at_s', ['at_s'], unique=False)
        batch_op.create_index('ix_usage_ledger_kind_subject_id_id', ['kind', 'subject_id', 'id'], unique=False)
        batch_op.create_index('ix_usage_ledger_tenant_id_at_s', ['tenant_id', 'at_s'], unique=False)
    _protect_ledger()

    op.create_table('usage_samples',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('taken_s', sa.BigInteger(), nullable=False),
    sa.Column('source', sa.String(length=10), nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=False),
    sa.Column('gpu_class_id', sa.Integer(), nullable=True),
    sa.Column('subject_id', sa.Integer(), nullable=False),
    sa.Column('used_gpus', sa.Double(), nullable=False),
    sa.Column('allocated_gpus', sa.Double(), nullable=False),
    sa.Column('requested_gpus', sa.Double(), nullable=False),
    sa.CheckConstraint("source IN ('queue', 'quota', 'node')", name=op.f('ck_usage_samples_source')),
    sa.ForeignKeyConstraint(['gpu_class_id'], ['gpu_classes.id'], name=op.f('fk_usage_samples_gpu_class_id_gpu_classes')),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], name=op.f('fk_usage_samples_tenant_id_tenants')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_usage_samples'))
    )
    with op.batch_alter_table('usage_samples', schema=None) as batch_op:
        batch_op.create_index('ix_usage_samples_taken_s', ['taken_s'], unique=False)
        batch_op.create_index('ix_usage_samples_tenant_id_taken_s', ['tenant_id', 'taken_s'], unique=False)



MESSAGE = "usage_ledger is append-only"


def _protect_ledger() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"""
            CREATE FUNCTION usage_ledger_append_only() RETURNS trigger AS $$
            BEGIN RAISE EXCEPTION '{MESSAGE}'; END;
            $$ LANGUAGE plpgsql""")
        op.execute("""
            CREATE TRIGGER usage_ledger_append_only BEFORE UPDATE OR DELETE ON usage_ledger
            FOR EACH ROW EXECUTE FUNCTION usage_ledger_append_only()""")
        return
    for event in ("UPDATE", "DELETE"):
        op.execute(f"""
            CREATE TRIGGER usage_ledger_no_{event.lower()} BEFORE {event} ON usage_ledger
            BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END""")


def _unprotect_ledger() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER usage_ledger_append_only ON usage_ledger")
        op.execute("DROP FUNCTION usage_ledger_append_only()")
        return
    for event in ("update", "delete"):
        op.execute(f"DROP TRIGGER usage_ledger_no_{event}")


def downgrade() -> None:
    with op.batch_alter_table('usage_samples', schema=None) as batch_op:
        batch_op.drop_index('ix_usage_samples_tenant_id_taken_s')
        batch_op.drop_index('ix_usage_samples_taken_s')

    op.drop_table('usage_samples')
    _unprotect_ledger()
    with op.batch_alter_table('usage_ledger', schema=None) as batch_op:
        batch_op.drop_index('ix_usage_ledger_tenant_id_at_s')
        batch_op.drop_index('ix_usage_ledger_kind_subject_id_id')
        batch_op.drop_index('ix_usage_ledger_at_s')

    op.drop_table('usage_ledger')
    with op.batch_alter_table('usage_hourly', schema=None) as batch_op:
        batch_op.drop_index('ix_usage_hourly_tenant_id_hour_s')
        batch_op.drop_index('ix_usage_hourly_hour_s')

    op.drop_table('usage_hourly')
