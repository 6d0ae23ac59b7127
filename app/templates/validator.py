"""The worker's side of template validation: runs the validations admins queued.

The checks dry-run the template's host objects on the host cluster and ask it about user
namespaces, with the worker's credentials (deploy/kubernetes/base/rbac-worker.yaml); the web
process, which has no Kubernetes rights, only queues them (``service.request_validation``).

A version is claimed with a lease (``validation_lease_until``) in a short transaction that skips
rows another worker has locked, then validated outside any transaction (the checks call the host
and the chart registries), then the result is stored. A worker that dies mid-validation leaves
the lease to run out; the next worker takes the version again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import or_, select

from app.database.core import Database, utcnow
from app.gpu_classes.models import GpuClass
from app.hosts import service as hosts_service
from app.kit.config import Settings
from app.kube.connector import KubeConnector, for_host
from app.kube.port import HostProbe
from app.templates import service
from app.templates.charts import ChartResolver, ChartSources
from app.templates.models import ClusterTemplateVersion
from app.templates.schemas import VersionSettings

log = logging.getLogger(__name__)

ACTOR = "template-validator"
BATCH = 20
# Longer than any validation: the checks' calls time out well within it.
LEASE_SECONDS = 300.0


@dataclass(frozen=True)
class Claimed:
    version_id: int
    requested_at: datetime
    settings: VersionSettings
    gpu_product: str | None


class TemplateValidator:
    name = "template-validation"

    def __init__(self, settings: Settings, database: Database, connector: KubeConnector,
                 charts: ChartResolver | None = None, *,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.settings = settings
        self.database = database
        self.connector = connector
        self.charts = charts or ChartSources()
        self.clock = clock

    def run_due(self, worker_id: str) -> int:
        handled = 0
        while handled < BATCH:
            claimed = self._claim()
            if claimed is None:
                break
            self._validate(claimed)
            handled += 1
        return handled

    def _claim(self) -> Claimed | None:
        now = self.clock()
        with self.database.transaction() as db:
            row = db.scalar(
                select(ClusterTemplateVersion)
                .where(ClusterTemplateVersion.validation_requested_at.is_not(None),
                       or_(ClusterTemplateVersion.validation_lease_until.is_(None),
                           ClusterTemplateVersion.validation_lease_until < now))
                .order_by(ClusterTemplateVersion.validation_requested_at)
                .limit(1).with_for_update(skip_locked=True))
            if row is None or row.validation_requested_at is None:
                return None
            row.validation_lease_until = now + timedelta(seconds=LEASE_SECONDS)
            gpu_class = db.get(GpuClass, row.gpu_class_id) if row.gpu_class_id else None
            return Claimed(row.id, row.validation_requested_at, service.settings_of(row),
                           gpu_class.product if gpu_class else None)

    def _validate(self, claimed: Claimed) -> None:
        result = service.run_validation(claimed.settings, claimed.gpu_product, self.settings,
                                        self._open_hosts(), self.charts)
        with self.database.transaction() as db:
            row = db.get(ClusterTemplateVersion, claimed.version_id, with_for_update=True)
            if row is None:
                return
            service.store_validation(db, row, claimed.requested_at, result, ACTOR)
        log.info("template version %d validated: %s", claimed.version_id,
                 "passed" if result["passed"] else "failed")

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
