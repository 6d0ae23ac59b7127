"""Nodes, one host cluster per key: inventory sync and the tenant label and taint of dedicated
nodes.

A reconcile lists the host's nodes with that host's client, upserts the GPU inventory, compares
every live node's tenant label and taint with its assignment in the database, and applies
``node_tenant_patch`` (server-side apply, forced: the tenant key is ours) only to nodes that
differ, so a converged host costs one list and no writes (with dedicated nodes, also the lists
of node_strangers.py, which then evicts other tenants' pods still on a dedicated node).

The runtime reconciles each host at every resync period, and at once when the nodes service
makes or ends an assignment (it enqueues the host's key in the same transaction). A node whose
patch fails transiently does not stop the others; the key is then retried with the runtime's
backoff per key (never sooner than the server's Retry-After), and the retry patches every node
still differing. A host that does not answer opens its breaker; a host gone from the database
is forgotten.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from app.database.core import Database, utcnow
from app.hosts import repository as hosts_repository
from app.kit.config import Settings
from app.kube.connector import KubeConnector
from app.kube.errors import ApplyConflictError, KubeError, PermanentKubeError
from app.kube.manifests import labels as lbl
from app.kube.manifests import node_tenant_patch
from app.kube.manifests.nodes import node_labels, tenant_taint
from app.kube.port import KubePort, Manifest
from app.nodes import repository
from app.nodes.inventory import read_node
from app.nodes.sync import record_observed, sync_inventory
from app.reconcilers.host_keys import (
    client,
    failure,
    host_keys,
    host_target,
    server_delay,
    unreachable,
    wait_for_breaker,
)
from app.reconcilers.kind import (
    DONE,
    GONE,
    Context,
    HostUnreachable,
    Outcome,
    RetryLater,
    TerminalError,
)
from app.reconcilers.leases import Lease
from app.reconcilers.node_strangers import dedicated_nodes, evict_strangers
from app.workqueue import NODES

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodePatch:
    node: str
    tenant: str | None
    taints: list[dict[str, Any]]
    resource_version: str | None


def needs_patch(labels: dict[str, Any], taints: list[dict[str, Any]],
                tenant: str | None) -> bool:
    """Whether a node's tenant or pool label or its taint differs from what its assignment
    asks."""
    ours = [t for t in taints if t.get("key") == lbl.TENANT]
    held = {key: labels[key] for key in (lbl.TENANT, lbl.POOL) if key in labels}
    wanted = [] if tenant is None else [tenant_taint(tenant)]
    return held != node_labels(tenant) or ours != wanted


class NodeReconciler:
    """Syncs one registered host's nodes with that host's client per key."""

    name = NODES

    def __init__(self, settings: Settings, database: Database, kube: KubeConnector, *,
                 now: Callable[[], datetime] = utcnow) -> None:
        self.settings = settings
        self.database = database
        self.kube = kube
        self.rack_label = settings.rack_label
        self.resync_seconds = settings.worker_resync_seconds
        self.now = now

    def keys(self, db: Session) -> list[str]:
        return host_keys(db, self.settings)

    def reconcile(self, key: str, context: Context) -> Outcome:
        target = host_target(self.database, self.settings, key)
        if target is None:
            return GONE
        wait_for_breaker(context, target.host_id)
        host = client(self.kube, target)
        if host is None:
            return DONE  # this connector reaches no such host: nothing to sync
        try:
            listed = host.list("v1", "Node")
        except KubeError as error:
            log.warning("listing the nodes of host cluster %s failed (%s)", target.name,
                        error.message)
            raise failure(target, error, "listing the nodes") from error
        context.hosts.reached(target.host_id)
        patches = self._sync(target.host_id, listed, context.lease)
        if patches is None:
            return GONE  # deleted meanwhile
        applied, failed = self._apply(host, patches, context.lease)
        self._record(target.host_id, applied, context.lease)
        if failed:
            raise _patch_failure(target.host_id, failed)
        now = {str(n["metadata"]["name"]): n for n in listed} | applied
        context.lease.check()
        try:
            evict_strangers(host, dedicated_nodes(list(now.values())))
        except KubeError as error:
            raise failure(target, error, "evicting other tenants' pods") from error
        return DONE

    def _sync(self, host_id: int, listed: list[Manifest],
              lease: Lease) -> list[NodePatch] | None:
        versions = {str(m["metadata"]["name"]): m["metadata"].get("resourceVersion")
                    for m in listed}
        with self.database.transaction() as db:
            lease.fence(db)
            cluster = hosts_repository.host_by_id(db, host_id)
            if cluster is None:
                return None
            facts = [f for f in (read_node(m, self.rack_label) for m in listed) if f]
            report = sync_inventory(db, cluster, facts, utcnow())
            desired = repository.desired_tenants(db, cluster.id)
            nodes = repository.nodes_of_host(db, cluster.id)
            patches = [
                NodePatch(name, desired.get(name), list(row.taints), versions.get(name))
                for name, row in sorted(nodes.items())
                if row.gone_at is None and needs_patch(row.labels, row.taints, desired.get(name))
            ]
            host_name = cluster.name
        if report.added or report.gone or report.returned:
            log.info("inventory of %s: %d GPU nodes, added %s, gone %s, back %s", host_name,
                     report.seen, report.added, report.gone, report.returned)
        return patches

    def _apply(self, host: KubePort, patches: list[NodePatch],
               lease: Lease) -> tuple[dict[str, Manifest], dict[str, KubeError]]:
        """Every patch, each on its own: one that fails leaves the others to go on."""
        applied: dict[str, Manifest] = {}
        failed: dict[str, KubeError] = {}
        for patch in patches:
            lease.check()
            try:
                applied[patch.node] = self._apply_one(host, patch)
            except KubeError as error:
                failed[patch.node] = error
                log.warning("labelling node %s for %s failed (%s: %s); retrying later",
                            patch.node, patch.tenant or "no tenant", error.reason,
                            error.message)
                if unreachable(error):
                    break  # the host is gone: the others would wait for their timeouts too
        return applied, failed

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

    def _record(self, host_id: int, applied: dict[str, Manifest], lease: Lease) -> None:
        """What the host answered becomes what the inventory last saw."""
        if not applied:
            return
        with self.database.transaction() as db:
            lease.fence(db)
            nodes = repository.nodes_of_host(db, host_id)
            for name, stored in applied.items():
                row = nodes.get(name)
                if row is not None:
                    record_observed(row, (stored.get("metadata") or {}).get("labels") or {},
                                    (stored.get("spec") or {}).get("taints") or [])


def _patch_failure(host_id: int, failed: dict[str, KubeError]) -> Exception:
    """The failed patches as the runtime takes them: the host's breaker when it stopped
    answering; a retry with backoff when any may pass on a retry (a conflict too: the node
    changed twice meanwhile), never sooner than the longest Retry-After; else the resync."""
    names = ", ".join(sorted(failed))
    errors = list(failed.values())
    message = f"labelling nodes {names} failed ({errors[0].reason}: {errors[0].message})"
    if any(unreachable(error) for error in errors):
        return HostUnreachable(host_id, message)
    retried = [e for e in errors
               if not isinstance(e, PermanentKubeError) or isinstance(e, ApplyConflictError)]
    if not retried:
        return TerminalError(message)
    delays = [d for d in (server_delay(e) for e in retried) if d is not None]
    return RetryLater(message, delay=max(delays) if delays else None)
