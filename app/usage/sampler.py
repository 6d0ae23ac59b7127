"""The worker side of usage: on each resync, what each host reports becomes samples.

Per host, three LISTs (queues, quotas, and running pods while a node there is dedicated) and
one transaction for its samples; then the raw samples past their retention are folded into
hourly ones in the same pass. A host's objects count only for the clusters and nodes placed
on that host.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqlalchemy.orm import Session

from app.config import Settings
from app.db import Database
from app.hosts import service as hosts_service
from app.kube.connector import HostTarget, KubeConnector, for_host
from app.kube.errors import KubeError
from app.kube.usage import HostUsage, read_host_usage
from app.usage import ledger, samples

log = logging.getLogger(__name__)
# A host that could not be read is skipped for a while, doubling from two resyncs (of at least
# a second each) to this: an unreachable host costs the others a client timeout per try, not
# per pass.
MAX_HOST_BACKOFF_SECONDS = 600.0


class UsageSampler:
    """Each pass reads every registered host the portal can reach, each with its own client,
    and stores that host's samples in a transaction of its own. A host that cannot be read is
    logged and skipped: its earlier samples stay, the other hosts are sampled as usual, and it
    is tried again after a backoff that doubles while it keeps failing."""

    name = "usage"

    def __init__(self, settings: Settings, database: Database, kube: KubeConnector, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.database = database
        self.kube = kube
        self.resync_seconds = settings.worker_resync_seconds
        self.clock = clock
        self._next_pass = 0.0
        self._failures: dict[int, int] = {}
        self._retry_at: dict[int, float] = {}

    def run_due(self, worker_id: str) -> int:
        if self.clock() < self._next_pass:
            return 0
        self._next_pass = self.clock() + self.resync_seconds
        with self.database.transaction() as db:
            targets = hosts_service.targets(db, self.settings)
            dedicated = samples.dedicated_nodes_by_host(db)
        now_s = int(ledger.now_in_seconds().timestamp())
        taken = 0
        for target in targets:
            if self._retry_at.get(target.host_id, 0.0) > self.clock():
                continue
            on_host = dedicated.get(target.host_id, {})
            usage = self._read(target, pods_on_nodes=bool(on_host))
            self._note(target.host_id, failed=usage is None)
            if usage is not None:
                with self.database.transaction() as db:
                    taken += record_usage(db, target.host_id, usage, now_s, on_host)
        with self.database.transaction() as db:
            samples.fold_old_samples(db, now_s)
            samples.expire_hourly(db, now_s)
        return taken

    def _note(self, host_id: int, *, failed: bool) -> None:
        if not failed:
            self._failures.pop(host_id, None)
            self._retry_at.pop(host_id, None)
            return
        failures = self._failures[host_id] = self._failures.get(host_id, 0) + 1
        delay = max(self.resync_seconds, 1.0) * 2 ** failures
        self._retry_at[host_id] = self.clock() + min(delay, MAX_HOST_BACKOFF_SECONDS)

    def _read(self, target: HostTarget, *, pods_on_nodes: bool) -> HostUsage | None:
        try:
            port = for_host(self.kube, target)
            if port is None:
                return None
            return read_host_usage(port, pods_on_nodes=pods_on_nodes)
        except KubeError as error:
            log.warning("reading GPU use from host cluster %s failed (%s); its last samples "
                        "stay; tried again after a backoff", target.name, error.message)
        except Exception as error:  # credentials the client cannot use: this host only
            log.error("reading GPU use from host cluster %s failed (%s); tried again after a "
                      "backoff",
                      target.name, type(error).__name__)
        return None


def record_usage(db: Session, host_id: int, usage: HostUsage, now_s: int,
                 dedicated: dict[str, samples.Owner]) -> int:
    """Stores one sample per queue, namespace quota and dedicated node the portal knows on the
    host ``usage`` was read from (``dedicated``: that host's assigned nodes by name)."""
    clusters = samples.clusters_by_name(db, host_id)
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
