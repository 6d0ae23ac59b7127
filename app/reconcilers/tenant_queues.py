"""A tenant's KAI queue on a host, kept by one kind keyed by (tenant, host): the parent of its
clusters' queues there, with the tenant's guarantee of the host's region (its approved quota
less its dedicated GPUs and its sleeping clusters' GPUs), its burst ceiling and weights.

A quota approval or a burst change enqueues these keys, not every cluster of the tenant; a
cluster created on a host, put to sleep, woken or removed enqueues its tenant's key there. The
queue goes once the tenant has no cluster on the host."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.clusters import desired
from app.clusters import repository as clusters
from app.kube import manifests
from app.kube.errors import KubeError
from app.kube.manifests import InvalidSpec
from app.kube.port import KubePort
from app.reconcilers.applying import apply_drifted
from app.reconcilers.host_keys import (
    HostWriter,
    client,
    failure,
    host_share,
    host_target,
    wait_for_breaker,
)
from app.reconcilers.kind import DONE, GONE, Context, Outcome, TerminalError
from app.workqueue import TENANT_QUEUES, tenant_queue_key


class TenantQueueReconciler(HostWriter):
    name = TENANT_QUEUES

    def keys(self, db: Session) -> list[str]:
        return [tenant_queue_key(tenant, host) for tenant, host in clusters.tenant_hosts(db)]

    def reconcile(self, key: str, context: Context) -> Outcome:
        tenant_id, host_id = (int(part) for part in key.split(":"))
        try:
            with self.database.transaction() as db:
                wanted = desired.load_tenant_queue(db, tenant_id, host_id, self.settings)
        except InvalidSpec as error:
            raise TerminalError(f"the queue of tenant {tenant_id}: {error}") from error
        target = host_target(self.database, self.settings, str(host_id))
        if wanted is None or target is None:
            return GONE
        wait_for_breaker(context, host_id)
        host = client(self.kube, target)
        if host is None:
            return DONE
        try:
            with host_share(context, host_id):
                _ensure(host, wanted, context)
        except KubeError as error:
            raise failure(target, error, f"the queue of tenant {wanted.slug}") from error
        context.hosts.reached(host_id)
        return GONE if wanted.queue is None else DONE


def _ensure(host: KubePort, wanted: desired.DesiredTenantQueue, context: Context) -> None:
    if wanted.queue is None:
        context.lease.check()
        host.delete(manifests.labels.KAI_API_VERSION, "Queue",
                    manifests.tenant_queue_name(wanted.slug))
    else:
        apply_drifted(host, [wanted.queue], context.lease.check)
