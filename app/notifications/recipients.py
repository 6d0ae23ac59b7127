"""Who hears of an event, resolved when it is emitted.

Every query is by the event's own tenant: a person named by the event (a requester, a creator,
a holder) is told only while still a member of it, so a member of another tenant can never be
selected. Platform admins are the users the IdP's admin group or an operator made so.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from sqlalchemy import Select, or_, select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.clusters.models import VirtualCluster
from app.kubeconfigs.models import KubeconfigGrant
from app.notifications.models import WebhookEndpoint
from app.quotas.models import QuotaRequest
from app.tenants.models import Membership

# tenant_admins: the admins of the event's tenant; platform_admins; the others the one person
# the event's subject names: a quota request's requester, a cluster's creator, a kubeconfig's
# holder, a webhook endpoint's registrant.
Role = Literal["tenant_admins", "platform_admins", "requester", "creator", "holder",
               "registrant"]


def resolve(db: Session, roles: Iterable[Role], tenant_id: int | None,
            subject_id: str) -> list[int]:
    """The user ids the roles name, each once, in the order of the roles."""
    found: dict[int, None] = {}
    for role in roles:
        found.update(dict.fromkeys(_of_role(db, role, tenant_id, subject_id)))
    return list(found)


def _of_role(db: Session, role: Role, tenant_id: int | None, subject_id: str) -> list[int]:
    if role == "platform_admins":
        return platform_admins(db)
    if role == "registrant":
        return _registrant(db, tenant_id, subject_id)
    if tenant_id is None:
        return []
    if role == "tenant_admins":
        return tenant_admins(db, tenant_id)
    subject = int(subject_id) if subject_id.isdigit() else None
    if subject is None:
        return []
    person = {"requester": _requester, "creator": _creator, "holder": _holder}[role]
    return _members(db, tenant_id, person(subject, tenant_id))


def platform_admins(db: Session) -> list[int]:
    return list(db.scalars(select(User.id).where(
        or_(User.is_platform_admin, User.admin_granted)).order_by(User.id)))


def tenant_admins(db: Session, tenant_id: int) -> list[int]:
    return list(db.scalars(select(Membership.user_id).where(
        Membership.tenant_id == tenant_id, Membership.role == "admin").order_by(
        Membership.user_id)))


def _members(db: Session, tenant_id: int, person: Select[Any]) -> list[int]:
    """The person the subject names, if a member of the tenant today (any role)."""
    return list(db.scalars(select(Membership.user_id).where(
        Membership.tenant_id == tenant_id, Membership.user_id.in_(person))))


def _registrant(db: Session, tenant_id: int | None, subject_id: str) -> list[int]:
    """Who registered the endpoint, while still one of those who manage it: an admin of its
    tenant, or for the platform's a platform admin."""
    endpoint_id = int(subject_id) if subject_id.isdigit() else None
    owned = (WebhookEndpoint.tenant_id.is_(None) if tenant_id is None
             else WebhookEndpoint.tenant_id == tenant_id)
    person = db.scalar(select(WebhookEndpoint.created_by_id).where(
        WebhookEndpoint.id == endpoint_id, owned))
    if person is None:
        return []
    managers = platform_admins(db) if tenant_id is None else tenant_admins(db, tenant_id)
    return [person] if person in managers else []


def _requester(request_id: int, tenant_id: int) -> Select[Any]:
    return select(QuotaRequest.requested_by_id).where(
        QuotaRequest.id == request_id, QuotaRequest.tenant_id == tenant_id)


def _creator(cluster_id: int, tenant_id: int) -> Select[Any]:
    return select(VirtualCluster.created_by_id).where(
        VirtualCluster.id == cluster_id, VirtualCluster.tenant_id == tenant_id)


def _holder(grant_id: int, tenant_id: int) -> Select[Any]:
    return select(KubeconfigGrant.user_id).join(
        VirtualCluster, VirtualCluster.id == KubeconfigGrant.cluster_id).where(
        KubeconfigGrant.id == grant_id, VirtualCluster.tenant_id == tenant_id)
