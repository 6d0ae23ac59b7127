"""The worker side of quota expiry: each pass expires what has come due, in one transaction."""

from __future__ import annotations

import logging

from app.database.core import Database, utcnow
from app.quotas.service import expire_quotas

log = logging.getLogger(__name__)


class QuotaExpiryReconciler:
    name = "quota-expiry"

    def __init__(self, database: Database) -> None:
        self.database = database

    def run_due(self, worker_id: str) -> int:
        with self.database.transaction() as db:
            expired = expire_quotas(db, utcnow())
        for item in expired:
            log.info("quota request %d expired: %d GPUs taken back, clusters over quota: %s",
                     item.request_id, item.gpus, item.over_quota_cluster_ids or "none")
        return len(expired)
