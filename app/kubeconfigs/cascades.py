"""Kubeconfig grants end with the access they were issued under.

Connected to the hooks of the lower domains (app.kit.hooks): a membership ending or shrinking,
a tenant suspended, a cluster being deleted. Each revocation is audited in the same
transaction as the change that caused it.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.clusters import events as cluster_events
from app.kubeconfigs import service
from app.tenants import events as tenant_events


@tenant_events.membership_changed.connect
def _on_membership_changed(db: Session, change: tenant_events.MembershipChanged) -> None:
    service.on_membership_changed(db, change.tenant_id, change.user_id, change.role,
                                  actor_id=change.actor.user_id, actor_label=change.actor.label)


@tenant_events.tenant_suspended.connect
def _on_tenant_suspended(db: Session, event: tenant_events.TenantSuspended) -> None:
    service.revoke_grants_for_tenant(db, event.tenant_id, actor_id=event.actor.user_id,
                                     actor_label=event.actor.label)


@cluster_events.cluster_deleting.connect
def _on_cluster_deleting(db: Session, event: cluster_events.ClusterDeleting) -> None:
    service.revoke_grants_for_cluster(db, event.cluster_id, actor_label=event.actor_label)


@cluster_events.cluster_row_deleting.connect
def _on_cluster_row_deleting(db: Session, event: cluster_events.ClusterDeleting) -> None:
    service.forget_grants_for_cluster(db, event.cluster_id)
