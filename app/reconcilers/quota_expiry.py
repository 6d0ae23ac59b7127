"""Kind ``quota-expiry``: takes back the quota of approved requests whose end has passed.

One key, ``all``: each run expires what has come due, in one transaction, and is due again a
resync period later. Nothing enqueues it (time passing changes no row), so the period is short:
``worker_poll_seconds * 15``, 30 s by default, and an end date passes unnoticed at most that
long. Each expiry enqueues the tenant's clusters (``app.quotas.service``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime

from sqlalchemy.orm import Session

from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.quotas.service import expire_quotas
from app.reconcilers.kind import DONE, GONE, Context, Outcome
from app.workqueue import ALL, QUOTA_EXPIRY

log = logging.getLogger(__name__)

KEY = ALL


class QuotaExpiryReconciler:
    name = QUOTA_EXPIRY

    def __init__(self, settings: Settings, database: Database, *,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.settings = settings
        self.database = database
        self.now = clock
        self.resync_seconds = settings.worker_poll_seconds * 15

    def keys(self, db: Session) -> Iterable[str]:
        return [KEY]

    def reconcile(self, key: str, context: Context) -> Outcome:
        if key != KEY:
            return GONE
        with self.database.transaction() as db:
            expired = expire_quotas(db, self.now())
        for item in expired:
            log.info("quota request %d expired: %d GPUs taken back, the tenant %d GPUs over "
                     "its quota, clusters over quota: %s", item.request_id, item.gpus,
                     item.over_quota_gpus, item.over_quota_cluster_ids or "none")
        return DONE
