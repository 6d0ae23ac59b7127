"""less than a GPU (issue 61): grants in whole GPUs, MIG slices of one profile, or a share of one
GPU in hundredths; a GPU class's share step

Quota requests, tenant quotas and virtual clusters gain ``unit`` (``gpu``, ``mig``, ``share``),
``mig_profile`` (``''`` but for ``mig``) and ``amount`` in the unit's steps; every existing row
is whole GPUs (``amount = gpus``). ``gpus`` keeps meaning whole GPUs and is 0 on the other
units, so every sum of ``gpus`` stays right. GPUs in use, the ledger and the samples name the
unit and profile they count in. A GPU class may be shared in steps of ``share_step``
hundredths (NULL: not shared).

Down again, what cannot be said in whole GPUs goes: quota and requests of slices or shares,
and the figures of them; clusters of slices or shares stay, holding no GPUs.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-07 13:00:00
"""

from collections.abc import Callable, Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UNITS = "unit IN ('gpu', 'mig', 'share')"
PROFILE = "(unit = 'mig' AND mig_profile <> '') OR (unit <> 'mig' AND mig_profile = '')"
GPU_AMOUNT = "unit <> 'gpu' OR amount = gpus"
WHOLE_ONLY = "unit = 'gpu' OR gpus = 0"
REQUESTED_SHARE = ("unit <> 'share' OR (amount BETWEEN 1 AND 100 AND "
                   "(approved_amount IS NULL OR approved_amount <= 100))")
SHARE_STEP = "share_step IS NULL OR (share_step BETWEEN 1 AND 100 AND 100 % share_step = 0)"
MESSAGE = "usage_ledger is append-only"
GRANTS = ("quota_requests", "tenant_quotas", "virtual_clusters")
COUNTED = ("quota_gpus_in_use", "usage_samples", "usage_hourly")
HOURLY_KEY = ["source", "subject_id", "tenant_id", "hour_s"]
IN_USE_KEY = ["tenant_id", "gpu_class_id", "host_cluster_id"]


def _unit_columns() -> list[sa.Column[str]]:
    return [sa.Column("unit", sa.String(5), nullable=False, server_default="gpu"),
            sa.Column("mig_profile", sa.String(16), nullable=False, server_default="")]


def upgrade() -> None:
    with op.batch_alter_table("gpu_classes") as table:
        table.add_column(sa.Column("share_step", sa.Integer(), nullable=True))
        table.create_check_constraint("share_step", SHARE_STEP)
    _grants_up()
    _counted_up()
    _without_sqlite_triggers(_ledger_up)


def _grants_up() -> None:
    for name in GRANTS:
        with op.batch_alter_table(name) as table:
            for column in _unit_columns():
                table.add_column(column)
            table.add_column(sa.Column("amount", sa.Integer(), nullable=True))
            if name == "quota_requests":
                table.add_column(sa.Column("approved_amount", sa.Integer(), nullable=True))
        op.execute(f"UPDATE {name} SET amount = gpus")  # noqa: S608 - a constant table name
        with op.batch_alter_table(name) as table:
            table.alter_column("amount", existing_type=sa.Integer(), nullable=False)
            table.create_check_constraint("unit", UNITS)
            table.create_check_constraint("unit_profile", PROFILE)
            table.create_check_constraint("gpu_amount", GPU_AMOUNT)
            table.create_check_constraint("whole_gpus_only", WHOLE_ONLY)
            if name == "quota_requests":
                table.drop_constraint("gpus_positive", type_="check")
                table.create_check_constraint("gpus_non_negative", "gpus >= 0")
                table.create_check_constraint("amount_positive", "amount > 0")
                table.create_check_constraint(
                    "approved_amount_non_neg", "approved_amount IS NULL OR approved_amount >= 0")
                table.create_check_constraint("share_amount", REQUESTED_SHARE)
            else:
                table.create_check_constraint("amount_non_negative", "amount >= 0")
            if name == "tenant_quotas":
                table.drop_constraint("uq_tenant_quotas_tenant_id_gpu_class_id_region",
                                      type_="unique")
                table.create_unique_constraint(
                    op.f("uq_tenant_quotas_tenant_id_gpu_class_id_region_unit_mig_profile"),
                    ["tenant_id", "gpu_class_id", "region", "unit", "mig_profile"])
            if name == "virtual_clusters":
                table.create_check_constraint("parts_in_shared_pool",
                                              "unit = 'gpu' OR placement = 'shared-pool'")
    op.execute("UPDATE quota_requests SET approved_amount = approved_gpus")


def _counted_up() -> None:
    for name in COUNTED:
        with op.batch_alter_table(name) as table:
            for column in _unit_columns():
                table.add_column(column)
            table.create_check_constraint("unit", UNITS)
            if name == "quota_gpus_in_use":
                table.drop_constraint("pk_quota_gpus_in_use", type_="primary")
                table.create_primary_key("pk_quota_gpus_in_use",
                                         [*IN_USE_KEY, "unit", "mig_profile"])
            if name == "usage_hourly":
                table.drop_constraint(
                    "uq_usage_hourly_source_subject_id_tenant_id_hour_s", type_="unique")
                table.create_unique_constraint("uq_usage_hourly_subject_hour_unit",
                                               [*HOURLY_KEY, "unit", "mig_profile"])


def _ledger_up() -> None:
    with op.batch_alter_table("usage_ledger") as table:
        for column in _unit_columns():
            table.add_column(column)
        table.add_column(sa.Column("amount", sa.Integer(), nullable=True))
    _with_ledger_open(lambda: op.execute("UPDATE usage_ledger SET amount = gpus"))
    with op.batch_alter_table("usage_ledger") as table:
        table.alter_column("amount", existing_type=sa.Integer(), nullable=False)
        table.create_check_constraint("unit", UNITS)
        table.create_check_constraint("amount_non_negative", "amount >= 0")


def downgrade() -> None:
    _without_sqlite_triggers(_ledger_down)
    _counted_down()
    _grants_down()
    with op.batch_alter_table("gpu_classes") as table:
        table.drop_constraint("share_step", type_="check")
        table.drop_column("share_step")


def _ledger_down() -> None:
    with op.batch_alter_table("usage_ledger") as table:
        table.drop_constraint("amount_non_negative", type_="check")
        table.drop_constraint("unit", type_="check")
        for column in ("amount", "mig_profile", "unit"):
            table.drop_column(column)


def _counted_down() -> None:
    for name in COUNTED:
        op.execute(f"DELETE FROM {name} WHERE unit <> 'gpu'")  # noqa: S608 - a constant name
        with op.batch_alter_table(name) as table:
            if name == "usage_hourly":
                table.drop_constraint("uq_usage_hourly_subject_hour_unit", type_="unique")
                table.create_unique_constraint(
                    "uq_usage_hourly_source_subject_id_tenant_id_hour_s", HOURLY_KEY)
            if name == "quota_gpus_in_use":
                table.drop_constraint("pk_quota_gpus_in_use", type_="primary")
                table.create_primary_key("pk_quota_gpus_in_use", IN_USE_KEY)
            table.drop_constraint("unit", type_="check")
            table.drop_column("mig_profile")
            table.drop_column("unit")


def _grants_down() -> None:
    op.execute("DELETE FROM quota_requests WHERE unit <> 'gpu'")
    op.execute("DELETE FROM tenant_quotas WHERE unit <> 'gpu'")
    for name in reversed(GRANTS):
        with op.batch_alter_table(name) as table:
            for check in ("unit", "unit_profile", "gpu_amount", "whole_gpus_only"):
                table.drop_constraint(check, type_="check")
            if name == "quota_requests":
                for check in ("gpus_non_negative", "amount_positive", "approved_amount_non_neg",
                              "share_amount"):
                    table.drop_constraint(check, type_="check")
                table.create_check_constraint("gpus_positive", "gpus > 0")
                table.drop_column("approved_amount")
            else:
                table.drop_constraint("amount_non_negative", type_="check")
            if name == "tenant_quotas":
                table.drop_constraint(
                    "uq_tenant_quotas_tenant_id_gpu_class_id_region_unit_mig_profile",
                    type_="unique")
                table.create_unique_constraint(
                    "uq_tenant_quotas_tenant_id_gpu_class_id_region",
                    ["tenant_id", "gpu_class_id", "region"])
            if name == "virtual_clusters":
                table.drop_constraint("parts_in_shared_pool", type_="check")
            for column in ("amount", "mig_profile", "unit"):
                table.drop_column(column)


def _sqlite() -> bool:
    return bool(op.get_bind().dialect.name == "sqlite")


def _with_ledger_open(change: Callable[[], None]) -> None:
    """Runs ``change`` with the ledger's append-only trigger off on PostgreSQL (on SQLite the
    caller has dropped the triggers)."""
    if _sqlite():
        change()
        return
    op.execute("ALTER TABLE usage_ledger DISABLE TRIGGER usage_ledger_append_only")
    change()
    op.execute("ALTER TABLE usage_ledger ENABLE TRIGGER usage_ledger_append_only")


def _without_sqlite_triggers(change: Callable[[], None]) -> None:
    """Runs ``change``; on SQLite with the ledger's triggers dropped, then made again (a
    table copied by batch mode has none)."""
    if not _sqlite():
        change()
        return
    for event in ("update", "delete"):
        op.execute(f"DROP TRIGGER IF EXISTS usage_ledger_no_{event}")
    change()
    for event in ("UPDATE", "DELETE"):
        op.execute(f"""
            CREATE TRIGGER usage_ledger_no_{event.lower()} BEFORE {event} ON usage_ledger
            BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END""")
