"""Each cluster keeps its latest condition transitions (``condition_transitions``, the last 20
per cluster), which the cluster page draws as a timeline; before, only the latest transition
of each condition was known. Clusters start with their conditions' current transitions.

Revision ID: 0025
Revises: 0023
Create Date: 2026-12-02 18:00:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

clusters = sa.table("virtual_clusters", sa.column("id", sa.Integer),
                    sa.column("conditions", sa.JSON))


def upgrade() -> None:
    transitions = op.create_table(
        "condition_transitions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cluster_id", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("reason", sa.String(length=200), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["cluster_id"], ["virtual_clusters.id"], ondelete="CASCADE",
                                name=op.f("fk_condition_transitions_cluster_id_virtual_clusters")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_condition_transitions")),
    )
    op.create_index("ix_condition_transitions_cluster_id_id", "condition_transitions",
                    ["cluster_id", "id"])
    rows = [row for cluster in op.get_bind().execute(sa.select(clusters))
            for row in _current(cluster.id, cluster.conditions or [])]
    if rows:
        op.bulk_insert(transitions, rows)


def downgrade() -> None:
    op.drop_index("ix_condition_transitions_cluster_id_id", table_name="condition_transitions")
    op.drop_table("condition_transitions")


def _current(cluster_id: int, conditions: list[dict[str, object]]) -> list[dict[str, object]]:
    found = []
    for condition in sorted(conditions, key=lambda c: str(c.get("lastTransitionTime", ""))):
        try:
            at = datetime.strptime(str(condition.get("lastTransitionTime")),
                                   "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            continue
        found.append({"cluster_id": cluster_id, "type": str(condition.get("type", ""))[:200],
                      "status": str(condition.get("status", ""))[:10],
                      "reason": str(condition.get("reason", ""))[:200],
                      "message": str(condition.get("message", "")), "at": at})
    return found
