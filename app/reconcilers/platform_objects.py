"""What every tenant on a host shares, kept by one kind per host: the KAI root queue every
tenant queue hangs from, the queue guard, the hardening guard and the guards that keep each
tenant off other tenants' nodes.

A cluster's reconcile never writes these: it waits until they are on its host (and asks for
them), so that no tenant pod runs before the guards that hold it."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from app.clusters.desired import manifest_policy
from app.kube import manifests
from app.kube.errors import KubeError
from app.reconcilers.applying import apply_drifted
from app.reconcilers.host_keys import (
    HostWriter,
    client,
    failure,
    host_keys,
    host_share,
    host_target,
    wait_for_breaker,
)
from app.reconcilers.kind import DONE, GONE, Context, Outcome
from app.workqueue import PLATFORM_OBJECTS

log = logging.getLogger(__name__)


class PlatformObjectsReconciler(HostWriter):
    name = PLATFORM_OBJECTS

    def keys(self, db: Session) -> list[str]:
        return host_keys(db, self.settings)

    def reconcile(self, key: str, context: Context) -> Outcome:
        target = host_target(self.database, self.settings, key)
        if target is None:
            return GONE
        wait_for_breaker(context, target.host_id)
        host = client(self.kube, target)
        if host is None:
            return DONE  # this connector reaches no such host
        objects = manifests.platform_objects(manifest_policy(self.settings))
        try:
            with host_share(context, target.host_id):
                written = apply_drifted(host, objects, context.lease.check)
        except KubeError as error:
            raise failure(target, error, "applying the root queue and the guards") from error
        context.hosts.reached(target.host_id)
        if written:
            log.info("host cluster %s: %d of its shared objects applied", target.name, written)
        return DONE
