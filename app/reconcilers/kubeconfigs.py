"""Kind ``kubeconfigs``: deletes the bound Secrets of revoked and expired grants.

Key: a grant's id. Revocations enqueue their grants in the revoking transaction (due at once);
the resync lists every ended grant whose Secret may still exist, which is how expired grants
are found (an expiry changes no row) and how a lost item comes back. A Secret already gone
counts as deleted. A failing clean-up is retried by the queue's backoff, never sooner than the
server's hint; a finished one leaves the queue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime

from sqlalchemy.orm import Session

from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kube.connector import KubeConnector
from app.kube.errors import KubeError, TransientKubeError
from app.kubeconfigs import repository
from app.kubeconfigs.service import VirtualClusters, clean_up_grant
from app.reconcilers.kind import GONE, Context, Outcome, RetryLater
from app.workqueue import KUBECONFIGS

log = logging.getLogger(__name__)


class KubeconfigReconciler:
    name = KUBECONFIGS

    def __init__(self, settings: Settings, database: Database, clusters: VirtualClusters, *,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.settings = settings
        self.database = database
        self.clusters = clusters
        self.now = clock
        # Expiry enqueues nothing: an expired grant's Secret is found by the resync, within
        # this long (its token has expired by itself already; the Secret is housekeeping).
        self.resync_seconds = settings.worker_poll_seconds * 15

    @classmethod
    def from_settings(cls, settings: Settings, database: Database,
                      kube: KubeConnector) -> KubeconfigReconciler:
        return cls(settings, database, VirtualClusters.from_settings(settings, kube))

    def keys(self, db: Session) -> Iterable[str]:
        return [str(grant_id) for grant_id in repository.cleanup_ids(db, self.now())]

    def reconcile(self, key: str, context: Context) -> Outcome:
        if not key.isdigit():
            return GONE
        context.lease.check()
        try:
            with self.database.transaction() as db:
                clean_up_grant(db, int(key), self.clusters, self.now())
        except KubeError as error:
            hint = error.delay_seconds if isinstance(error, TransientKubeError) else None
            raise RetryLater(f"{error.reason}: {error.message}"[:500], delay=hint) from error
        # Deleted now, or nothing (left) to delete: either way the grant is done with.
        return GONE
