"""audit events are append-only

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 15:15:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MESSAGE = "audit_events is append-only"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"""
            CREATE FUNCTION audit_events_append_only() RETURNS trigger AS $$
            BEGIN RAISE EXCEPTION '{MESSAGE}'; END;
            $$ LANGUAGE plpgsql""")
        op.execute("""
            CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events
            FOR EACH ROW EXECUTE FUNCTION audit_events_append_only()""")
        return
    for event in ("UPDATE", "DELETE"):
        op.execute(f"""
            CREATE TRIGGER audit_events_no_{event.lower()} BEFORE {event} ON audit_events
            BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END""")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER audit_events_append_only ON audit_events")
        op.execute("DROP FUNCTION audit_events_append_only()")
        return
    for event in ("update", "delete"):
        op.execute(f"DROP TRIGGER audit_events_no_{event}")
