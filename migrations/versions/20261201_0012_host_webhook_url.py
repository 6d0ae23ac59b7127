"""each host cluster's admission webhook address (issue 17: the webhook on every host)

``webhook_url`` is the ``https://`` address at which that host's API server reaches
``portal webhook``; the worker registers the webhook there with the path naming the host.
Existing hosts get none: the environment's host keeps PORTAL_WEBHOOK_URL or the in-cluster
Service, as before.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 04:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "host_clusters"


# Plain ALTER TABLE, no batch: SQLite's batch mode would copy the table that nodes and
# virtual_clusters refer to.
def upgrade() -> None:
    op.add_column(TABLE, sa.Column("webhook_url", sa.String(500), nullable=True))


def downgrade() -> None:
    op.drop_column(TABLE, "webhook_url")
