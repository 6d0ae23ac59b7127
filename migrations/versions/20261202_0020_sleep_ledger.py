"""The usage ledger records sleep: a new kind ``sleep`` (a shared-pool cluster's GPUs freed by
sleep, from when it fell asleep until it woke or was deleted), and an entry for each cluster
asleep now, from its ``asleep_since``.

The ledger is append-only (triggers of 0006). On SQLite the CHECK constraint changes by copying
the table, which leaves its triggers behind: they are made again on the copy. A downgrade
removes the sleep entries, which needs the triggers out of the way for that one DELETE.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-02 16:00:00
"""

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KINDS_BEFORE = "kind IN ('quota', 'cluster', 'node')"
KINDS_AFTER = "kind IN ('quota', 'cluster', 'node', 'sleep')"
MESSAGE = "usage_ledger is append-only"

clusters = sa.table(
    "virtual_clusters", sa.column("id", sa.Integer), sa.column("tenant_id", sa.Integer),
    sa.column("gpu_class_id", sa.Integer), sa.column("name", sa.String),
    sa.column("gpus", sa.Integer), sa.column("placement", sa.String),
    sa.column("asleep_since", sa.DateTime(timezone=True)),
    sa.column("deletion_requested_at", sa.DateTime(timezone=True)))
ledger = sa.table(
    "usage_ledger", sa.column("at", sa.DateTime(timezone=True)), sa.column("at_s", sa.BigInteger),
    sa.column("kind", sa.String), sa.column("subject_id", sa.Integer),
    sa.column("tenant_id", sa.Integer), sa.column("gpu_class_id", sa.Integer),
    sa.column("cluster_id", sa.Integer), sa.column("cluster_name", sa.String),
    sa.column("node_id", sa.Integer), sa.column("gpus", sa.Integer))


def upgrade() -> None:
    _without_sqlite_triggers(lambda: _check_kinds(KINDS_AFTER))
    _clusters_asleep_now()


def downgrade() -> None:
    if _sqlite():
        _without_sqlite_triggers(_forget_sleep)
        return
    op.execute("ALTER TABLE usage_ledger DISABLE TRIGGER usage_ledger_append_only")
    _forget_sleep()
    op.execute("ALTER TABLE usage_ledger ENABLE TRIGGER usage_ledger_append_only")


def _forget_sleep() -> None:
    op.execute(sa.delete(ledger).where(ledger.c.kind == "sleep"))
    _check_kinds(KINDS_BEFORE)


def _sqlite() -> bool:
    return bool(op.get_bind().dialect.name == "sqlite")


def _check_kinds(kinds: str) -> None:
    with op.batch_alter_table("usage_ledger") as table:
        table.drop_constraint(op.f("ck_usage_ledger_kind"), type_="check")
        table.create_check_constraint(op.f("ck_usage_ledger_kind"), kinds)


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


def _clusters_asleep_now() -> None:
    """A cluster already asleep counts from when it fell asleep (the ledger then agrees with
    the row, as the session events keep it)."""
    asleep = op.get_bind().execute(
        sa.select(clusters).where(clusters.c.asleep_since.is_not(None),
                                  clusters.c.deletion_requested_at.is_(None),
                                  clusters.c.placement == "shared-pool",
                                  clusters.c.gpu_class_id.is_not(None), clusters.c.gpus > 0))
    rows = [_entry(row) for row in asleep]
    if rows:
        op.bulk_insert(ledger, rows)


def _entry(row: sa.Row[tuple[object, ...]]) -> dict[str, object]:
    at = row.asleep_since
    at = (at if at.tzinfo else at.replace(tzinfo=UTC)).replace(microsecond=0)
    assert isinstance(at, datetime)
    return {"at": at, "at_s": int(at.timestamp()), "kind": "sleep", "subject_id": row.id,
            "tenant_id": row.tenant_id, "gpu_class_id": row.gpu_class_id, "cluster_id": row.id,
            "cluster_name": row.name, "node_id": None, "gpus": row.gpus}
