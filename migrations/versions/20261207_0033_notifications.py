"""notifications (issue 60): the outbox, its deliveries, webhook endpoints, preferences

A notification is written in the transaction of the change it tells of, with one delivery per
destination (a person's email, an endpoint); the worker delivers them.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-07 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _moment(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "notifications",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uid", sa.String(length=36), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=True),
        sa.Column("subject_type", sa.String(length=50), nullable=False),
        sa.Column("subject_id", sa.String(length=64), nullable=False),
        sa.Column("dedupe_key", sa.String(length=200), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("mandatory", sa.Boolean(), nullable=False),
        _moment("created_at"),
        _moment("deliver_after", nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="SET NULL",
                                name=op.f("fk_notifications_tenant_id_tenants")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notifications")),
        sa.UniqueConstraint("uid", name=op.f("uq_notifications_uid")),
        sa.UniqueConstraint("dedupe_key", name=op.f("uq_notifications_dedupe_key")),
    )
    op.create_index(op.f("ix_notifications_tenant_id"), "notifications", ["tenant_id"])
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=True),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("format", sa.String(length=20), nullable=False),
        sa.Column("secret_sealed", sa.Text(), nullable=False),
        sa.Column("previous_secret_sealed", sa.Text(), nullable=True),
        _moment("previous_until", nullable=True),
        sa.Column("kinds", sa.JSON(), nullable=True),
        sa.Column("created_by_id", sa.Integer(), nullable=True),
        _moment("created_at"),
        sa.Column("state", sa.String(length=10), nullable=False),
        _moment("failing_since", nullable=True),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.String(length=300), nullable=False),
        _moment("last_success_at", nullable=True),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.CheckConstraint("format IN ('slack', 'cloudevents')",
                           name=op.f("ck_webhook_endpoints_format")),
        sa.CheckConstraint("state IN ('ok', 'failing')", name=op.f("ck_webhook_endpoints_state")),
        sa.CheckConstraint("consecutive_failures >= 0",
                           name=op.f("ck_webhook_endpoints_failures_non_negative")),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE",
                                name=op.f("fk_webhook_endpoints_tenant_id_tenants")),
        sa.ForeignKeyConstraint(["created_by_id"], ["users.id"], ondelete="SET NULL",
                                name=op.f("fk_webhook_endpoints_created_by_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_endpoints")),
    )
    op.create_index(op.f("ix_webhook_endpoints_tenant_id"), "webhook_endpoints", ["tenant_id"])
    op.create_table(
        "notification_deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("notification_id", sa.Integer(), nullable=False),
        sa.Column("channel", sa.String(length=10), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("endpoint_id", sa.Integer(), nullable=True),
        sa.Column("destination", sa.String(length=40), nullable=False),
        sa.Column("state", sa.String(length=10), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        _moment("next_attempt_at"),
        _moment("sending_since", nullable=True),
        _moment("delivered_at", nullable=True),
        sa.Column("last_error", sa.String(length=300), nullable=False),
        sa.CheckConstraint("channel IN ('email', 'webhook')",
                           name=op.f("ck_notification_deliveries_channel")),
        sa.CheckConstraint("state IN ('pending', 'delivered', 'failed', 'dropped', 'expired')",
                           name=op.f("ck_notification_deliveries_state")),
        sa.CheckConstraint("attempts >= 0",
                           name=op.f("ck_notification_deliveries_attempts_non_negative")),
        sa.ForeignKeyConstraint(
            ["notification_id"], ["notifications.id"], ondelete="CASCADE",
            name=op.f("fk_notification_deliveries_notification_id_notifications")),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE",
                                name=op.f("fk_notification_deliveries_user_id_users")),
        sa.ForeignKeyConstraint(
            ["endpoint_id"], ["webhook_endpoints.id"], ondelete="CASCADE",
            name=op.f("fk_notification_deliveries_endpoint_id_webhook_endpoints")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notification_deliveries")),
        sa.UniqueConstraint(
            "notification_id", "destination",
            name=op.f("uq_notification_deliveries_notification_id_destination")),
    )
    op.create_index("ix_notification_deliveries_due", "notification_deliveries",
                    ["destination", "state", "next_attempt_at"])
    op.create_index(op.f("ix_notification_deliveries_user_id"), "notification_deliveries",
                    ["user_id"])
    op.create_index(op.f("ix_notification_deliveries_endpoint_id"), "notification_deliveries",
                    ["endpoint_id"])
    op.create_table(
        "notification_preferences",
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("email", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE",
                                name=op.f("fk_notification_preferences_user_id_users")),
        sa.PrimaryKeyConstraint("user_id", "kind", name=op.f("pk_notification_preferences")),
    )


def downgrade() -> None:
    op.drop_table("notification_preferences")
    op.drop_index(op.f("ix_notification_deliveries_endpoint_id"),
                  table_name="notification_deliveries")
    op.drop_index(op.f("ix_notification_deliveries_user_id"),
                  table_name="notification_deliveries")
    op.drop_index("ix_notification_deliveries_due", table_name="notification_deliveries")
    op.drop_table("notification_deliveries")
    op.drop_index(op.f("ix_webhook_endpoints_tenant_id"), table_name="webhook_endpoints")
    op.drop_table("webhook_endpoints")
    op.drop_index(op.f("ix_notifications_tenant_id"), table_name="notifications")
    op.drop_table("notifications")
