"""A user's name is as wide as an email address (320): a user invited by email is named by the
address until their first sign-in, and an address over 200 characters made adding them a 500.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-02 19:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.alter_column("name", existing_type=sa.String(length=200),
                              type_=sa.String(length=320), existing_nullable=False)


def downgrade() -> None:
    # Names longer than the old width are cut to it rather than refusing the downgrade.
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.alter_column("name", existing_type=sa.String(length=320),
                              type_=sa.String(length=200), existing_nullable=False,
                              postgresql_using="left(name, 200)")
