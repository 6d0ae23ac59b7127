"""Kind ``template-validation``: runs the validations admins queued.

Key: a template version's id. ``service.request_validation`` enqueues it in the requesting
transaction (due at once); the resync lists every version whose validation is requested, so a
lost item comes back. The runtime's lease keeps a version with one worker, and a worker that
dies mid-validation leaves its lease to run out: another takes the version again.

The checks dry-run the template's host objects on the host cluster and ask it about user
namespaces, with the worker's credentials (deploy/kubernetes/base/rbac-worker.yaml); the web
process, which has no Kubernetes rights, only queues them. They run outside any transaction
(they call the host and the chart registries); the result is stored under the lease.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.database.core import Database, utcnow
from app.gpu_classes.models import GpuClass
from app.hosts import service as hosts_service
from app.kit.config import Settings
from app.kube.connector import KubeConnector, for_host
from app.kube.port import HostProbe
from app.reconcilers.kind import GONE, Context, Outcome
from app.templates import service
from app.templates.charts import ChartResolver, ChartSources
from app.templates.models import ClusterTemplateVersion
from app.templates.schemas import VersionSettings
from app.workqueue import TEMPLATE_VALIDATION

log = logging.getLogger(__name__)

ACTOR = "template-validator"


@dataclass(frozen=True)
class Requested:
    version_id: int
    requested_at: datetime
    settings: VersionSettings
    gpu_product: str | None


class TemplateValidator:
    name = TEMPLATE_VALIDATION

    def __init__(self, settings: Settings, database: Database, connector: KubeConnector,
                 charts: ChartResolver | None = None, *,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.settings = settings
        self.database = database
        self.connector = connector
        self.charts = charts or ChartSources()
        self.now = clock
        # Requests enqueue: the resync only finds what was lost.
        self.resync_seconds = settings.worker_resync_seconds

    def keys(self, db: Session) -> Iterable[str]:
        return [str(version_id) for version_id in db.scalars(
            select(ClusterTemplateVersion.id)
            .where(ClusterTemplateVersion.validation_requested_at.is_not(None))
            .order_by(ClusterTemplateVersion.validation_requested_at))]

    def reconcile(self, key: str, context: Context) -> Outcome:
        requested = self._requested(int(key)) if key.isdigit() else None
        if requested is None:
            return GONE  # no longer asked for (or gone)
        result = service.run_validation(requested.settings, requested.gpu_product,
                                        self.settings, self._open_hosts(), self.charts)
        with self.database.transaction() as db:
            context.lease.fence(db)
            row = db.get(ClusterTemplateVersion, requested.version_id, with_for_update=True)
            if row is None:
                return GONE
            service.store_validation(db, row, requested.requested_at, result, ACTOR)
            again = row.validation_requested_at is not None
        log.info("template version %d validated: %s", requested.version_id,
                 "passed" if result["passed"] else "failed")
        # Asked for again meanwhile: once more, at once.
        return Outcome(requeue_after=0) if again else GONE

    def _requested(self, version_id: int) -> Requested | None:
        with self.database.transaction() as db:
            row = db.get(ClusterTemplateVersion, version_id)
            if row is None or row.validation_requested_at is None:
                return None
            gpu_class = db.get(GpuClass, row.gpu_class_id) if row.gpu_class_id else None
            return Requested(row.id, row.validation_requested_at, service.settings_of(row),
                             gpu_class.product if gpu_class else None)

    def _open_hosts(self) -> dict[str, HostProbe | None]:
        """Every host new clusters may go to (active, reachable with its credentials), each
        through its own client; a host whose credentials no key opens is left out (logged)."""
        with self.database.transaction() as db:
            targets = hosts_service.targets(db, self.settings, only_open=True)
        found: dict[str, HostProbe | None] = {}
        for target in targets:
            port = for_host(self.connector, target)
            found[target.name] = port if isinstance(port, HostProbe) else None
        return found
