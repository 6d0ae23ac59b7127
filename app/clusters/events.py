"""What happens to virtual clusters that higher domains follow up on (app.kit.hooks)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.kit.hooks import Hook


@dataclass(frozen=True)
class ClusterDeleting:
    cluster_id: int
    actor_label: str


# The worker starts taking a cluster down: access to it ends first.
cluster_deleting: Hook[[Session, ClusterDeleting]] = Hook(
    "clusters.cluster_deleting", required=True)
# The cluster's row is about to go: rows that reference it must go first.
cluster_row_deleting: Hook[[Session, ClusterDeleting]] = Hook(
    "clusters.cluster_row_deleting", required=True)
