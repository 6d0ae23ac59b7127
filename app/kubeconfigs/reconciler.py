"""The worker side of revocation: deletes the bound Secrets of revoked and expired grants.

Level-triggered: each pass asks the database which ended grants still have a Secret that may
exist, and deletes it (a Secret already gone counts as deleted). Failures back off per grant,
by the server's hint when there is one, and are retried on later passes.
"""

from __future__ import annotations

from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kube.connector import KubeConnector
from app.kubeconfigs import repository
from app.kubeconfigs.service import VirtualClusters, clean_up_grant

BATCH = 50


class KubeconfigReconciler:
    name = "kubeconfigs"

    def __init__(self, database: Database, clusters: VirtualClusters, batch: int = BATCH) -> None:
        self.database = database
        self.clusters = clusters
        self.batch = batch

    @classmethod
    def from_settings(cls, settings: Settings, database: Database,
                      kube: KubeConnector) -> KubeconfigReconciler:
        return cls(database, VirtualClusters.from_settings(settings, kube))

    def run_due(self, worker_id: str) -> int:
        with self.database.transaction() as db:
            due = repository.due_cleanup_ids(db, utcnow(), self.batch)
        handled = 0
        for grant_id in due:
            # One transaction per grant: a failing cluster does not hold back the others.
            with self.database.transaction() as db:
                handled += clean_up_grant(db, grant_id, self.clusters, utcnow())
        return handled
