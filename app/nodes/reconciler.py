"""The worker side of nodes: inventory sync and the tenant label and taint of dedicated nodes.

Level-triggered, per registered host and with that host's client: each pass lists its nodes,
upserts the GPU inventory, compares every live node's tenant label and taint with its
assignment in the database, and applies ``node_tenant_patch`` (server-side apply, forced: the
tenant key is ours) only to nodes that differ, so a converged fleet costs one list per host and
no writes. A host's pass runs every resync period, and sooner when an assignment was made or
ended, or when a failed node is due for a retry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select

from app.database.core import Database, utcnow
from app.hosts import repository as hosts_repository
from app.hosts import service as hosts_service
from app.kit.config import Settings
from app.kube.connector import HostTarget, KubeConnector, for_host
from app.kube.errors import ApplyConflictError, KubeError, TransientKubeError
from app.kube.manifests import labels as lbl
from app.kube.manifests import node_tenant_patch
from app.kube.manifests.nodes import tenant_taint
from app.kube.port import KubePort, Manifest
from app.nodes import repository
from app.nodes.inventory import read_node
from app.nodes.models import NodeAssignment
from app.nodes.sync import record_observed, sync_inventory

log = logging.getLogger(__name__)
MAX_RETRY_SECONDS = 300.0


@dataclass(frozen=True)
class NodePatch:
    node: str
    tenant: str | None
    taints: list[dict[str, Any]]
    resource_version: str | None


def needs_patch(labels: dict[str, Any], taints: list[dict[str, Any]],
                tenant: str | None) -> bool:
    """Whether a node's tenant label or taint differs from what its assignment asks."""
    ours = [t for t in taints if t.get("key") == lbl.TENANT]
    if tenant is None:
        return lbl.TENANT in labels or bool(ours)
    return labels.get(lbl.TENANT) != tenant or ours != [tenant_taint(tenant)]


@dataclass
class _HostPass:
    """What the reconciler remembers of one host between passes."""

    next_resync: float = 0.0
    retry_at: dict[str, float] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)


class NodeReconciler:
    """Syncs every registered host's nodes with that host's client; a host that fails (it is
    unreachable, its credentials cannot be read) is retried later and does not stop the
    others."""

    name = "nodes"

    def __init__(self, settings: Settings, database: Database, kube: KubeConnector, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.database = database
        self.kube = kube
        self.rack_label = settings.rack_label
        self.resync_seconds = settings.worker_resync_seconds
        self.clock = clock
        self._assignments_seen: tuple[int, int] | None = None
        self._hosts: dict[int, _HostPass] = {}

    def run_due(self, worker_id: str) -> int:
        changed = self._assignments_changed()
        handled = 0
        for target in self._targets():
            port = self._port(target)
            if port is None:
                continue
            state = self._hosts.setdefault(target.host_id, _HostPass())
            if changed or self._due(state):
                handled += self._run_host(target, port, state)
        return handled

    def _port(self, target: HostTarget) -> KubePort | None:
        try:
            return for_host(self.kube, target)
        except Exception as error:  # credentials the client cannot use: skip this host only
            log.error("host cluster %s: no client from its credentials (%s)", target.name,
                      type(error).__name__)
            return None

    def _targets(self) -> list[HostTarget]:
        with self.database.transaction() as db:
            return hosts_service.targets(db, self.settings)

    def _run_host(self, target: HostTarget, host: KubePort, state: _HostPass) -> int:
        try:
            listed = host.list("v1", "Node")
        except KubeError as error:
            state.next_resync = self.clock() + self._delay(state, error, "list")
            log.warning("listing the nodes of host cluster %s failed (%s); retrying later",
                        target.name, error.message)
            return 0
        state.failures.pop("list", None)
        state.next_resync = self.clock() + self.resync_seconds
        patches = self._sync(target.host_id, listed, state)
        applied = self._apply(host, patches, state)
        self._record(target.host_id, applied)
        return len(applied)

    def _due(self, state: _HostPass) -> bool:
        now = self.clock()
        return now >= state.next_resync or any(at <= now for at in state.retry_at.values())

    def _assignments_changed(self) -> bool:
        with self.database.transaction() as db:
            total, ended = db.execute(select(func.count(NodeAssignment.id),
                                             func.count(NodeAssignment.ended_at))).one()
        seen, self._assignments_seen = self._assignments_seen, (int(total), int(ended))
        return seen != self._assignments_seen

    def _sync(self, host_id: int, listed: list[Manifest],
              state: _HostPass) -> list[NodePatch]:
        versions = {str(m["metadata"]["name"]): m["metadata"].get("resourceVersion")
                    for m in listed}
        now = self.clock()
        with self.database.transaction() as db:
            cluster = hosts_repository.host_by_id(db, host_id)
            if cluster is None:
                return []  # deleted meanwhile
            facts = [f for f in (read_node(m, self.rack_label) for m in listed) if f]
            report = sync_inventory(db, cluster, facts, utcnow())
            desired = repository.desired_tenants(db, cluster.id)
            nodes = repository.nodes_of_host(db, cluster.id)
            patches = [
                NodePatch(name, desired.get(name), list(row.taints), versions.get(name))
                for name, row in sorted(nodes.items())
                if row.gone_at is None and state.retry_at.get(name, 0.0) <= now
                and needs_patch(row.labels, row.taints, desired.get(name))
            ]
            host_name = cluster.name
        if report.added or report.gone or report.returned:
            log.info("inventory of %s: %d GPU nodes, added %s, gone %s, back %s", host_name,
                     report.seen, report.added, report.gone, report.returned)
        return patches

    def _apply(self, host: KubePort, patches: list[NodePatch],
               state: _HostPass) -> dict[str, Manifest]:
        applied: dict[str, Manifest] = {}
        for patch in patches:
            try:
                applied[patch.node] = self._apply_one(host, patch)
            except KubeError as error:
                state.retry_at[patch.node] = self.clock() + self._delay(state, error,
                                                                        patch.node)
                log.warning("labelling node %s for %s failed (%s: %s); retrying later",
                            patch.node, patch.tenant or "no tenant", error.reason,
                            error.message)
                continue
            state.retry_at.pop(patch.node, None)
            state.failures.pop(patch.node, None)
        return applied

    @staticmethod
    def _apply_one(host: KubePort, patch: NodePatch) -> Manifest:
        """Apply on the resourceVersion listed; if the node changed since (a status update,
        another controller's taint: routine in a large fleet), read that node again and apply on
        what it holds now, rather than waiting for the next pass to list every node again."""
        try:
            return host.apply(node_tenant_patch(patch.node, patch.tenant, patch.taints,
                                                resource_version=patch.resource_version),
                              force=True)
        except ApplyConflictError:
            fresh = host.get("v1", "Node", patch.node)
            if fresh is None:
                raise  # gone meanwhile: the next listing marks it so
        labels = fresh["metadata"].get("labels") or {}
        taints = (fresh.get("spec") or {}).get("taints") or []
        if not needs_patch(labels, taints, patch.tenant):
            return fresh
        return host.apply(node_tenant_patch(patch.node, patch.tenant, taints,
                                            resource_version=fresh["metadata"]["resourceVersion"]),
                          force=True)

    def _delay(self, state: _HostPass, error: KubeError, key: str) -> float:
        """The server's hint for transient errors, else exponential backoff per key."""
        failures = state.failures[key] = state.failures.get(key, 0) + 1
        if isinstance(error, TransientKubeError) and error.delay_seconds is not None:
            return min(error.delay_seconds, MAX_RETRY_SECONDS)
        return min(2.0 ** failures, MAX_RETRY_SECONDS)

    def _record(self, host_id: int, applied: dict[str, Manifest]) -> None:
        """What the host answered becomes what the inventory last saw."""
        if not applied:
            return
        with self.database.transaction() as db:
            nodes = repository.nodes_of_host(db, host_id)
            for name, stored in applied.items():
                row = nodes.get(name)
                if row is not None:
                    record_observed(row, (stored.get("metadata") or {}).get("labels") or {},
                                    (stored.get("spec") or {}).get("taints") or [])
