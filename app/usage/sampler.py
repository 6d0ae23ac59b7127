"""The worker side of usage: on each resync, what the host reports becomes samples.

Three LISTs per pass (queues, quotas, and running pods while any node is dedicated), one
transaction for the samples, and the raw samples past their retention folded into hourly ones
in the same pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqlalchemy.orm import Session

from app.config import Settings
from app.db import Database
from app.kube.connector import KubeConnector
from app.kube.errors import KubeError
from app.kube.usage import HostUsage, read_host_usage
from app.usage import ledger, samples

log = logging.getLogger(__name__)


class UsageSampler:
    name = "usage"

    def __init__(self, settings: Settings, database: Database, kube: KubeConnector, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.database = database
        self.kube = kube
        self.resync_seconds = settings.worker_resync_seconds
        self.clock = clock
        self._next_pass = 0.0

    def run_due(self, worker_id: str) -> int:
        host = self.kube.host()
        if host is None or self.clock() < self._next_pass:
            return 0
        self._next_pass = self.clock() + self.resync_seconds
        with self.database.session() as db:
            dedicated = samples.dedicated_nodes_by_name(db)
        try:
            usage = read_host_usage(host, pods_on_nodes=bool(dedicated))
        except KubeError as error:
            log.warning("reading GPU use from the host failed (%s); next resync", error.message)
            return 0
        now_s = int(ledger.now_in_seconds().timestamp())
        with self.database.transaction() as db:
            taken = record_usage(db, usage, now_s, dedicated)
            samples.fold_old_samples(db, now_s)
            samples.expire_hourly(db, now_s)
        return taken


def record_usage(db: Session, usage: HostUsage, now_s: int,
                 dedicated: dict[str, samples.Owner]) -> int:
    """Stores one sample per queue, namespace quota and dedicated node the portal knows."""
    clusters = samples.clusters_by_name(db)
    rows: list[dict[str, object]] = []
    for queue in usage.queues:
        owner = clusters.get((queue.tenant, queue.cluster))
        if owner is not None:
            rows.append(_row(now_s, "queue", owner, queue.allocated_gpus,
                             queue.allocated_gpus, queue.requested_gpus))
    for namespace in usage.namespaces:
        owner = clusters.get((namespace.tenant, namespace.cluster))
        if owner is not None:
            rows.append(_row(now_s, "quota", owner, namespace.used_gpus, namespace.hard_gpus,
                             namespace.used_gpus))
    for name, node in dedicated.items():
        used = usage.gpus_by_node.get(name, 0.0)
        rows.append(_row(now_s, "node", node, used, float(node.gpus), used))
    samples.add_samples(db, rows)
    return len(rows)


def _row(now_s: int, source: str, owner: samples.Owner, used: float, allocated: float,
         requested: float) -> dict[str, object]:
    return {"taken_s": now_s, "source": source, "tenant_id": owner.tenant_id,
            "gpu_class_id": owner.gpu_class_id, "subject_id": owner.subject_id,
            "used_gpus": used, "allocated_gpus": allocated, "requested_gpus": requested}
