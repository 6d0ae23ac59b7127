"""IdP groups mapped to tenant roles: membership follows the groups claim at each sign-in.

Memberships granted this way have source ``group``; a direct membership always wins, and a
group membership goes when the user leaves the group (at their next sign-in) or the mapping
is deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, StringConstraints
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.responses import Response

from app import authz
from app.audit import readable
from app.audit import service as audit
from app.auth import events as auth_events
from app.auth.deps import CurrentPrincipal
from app.auth.models import User
from app.auth.principal import Principal
from app.authz.routes import PLATFORM_WRITE
from app.database.concurrency import insert_or_conflict, lock_row
from app.http.deps import DbSession, RowId
from app.http.problems import problems
from app.http.routing import UnitOfWorkRoute
from app.kit.errors import Conflict, NotFound
from app.kit.validation import SingleLine
from app.tenants import access, events
from app.tenants.models import GroupMapping, Membership, Tenant

ROLE_RANK = {"viewer": 0, "member": 1, "admin": 2}


class GroupMappingIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group: Annotated[SingleLine, StringConstraints(min_length=1, max_length=255)]
    role: Literal["admin", "member", "viewer"]


class GroupMappingOut(BaseModel):
    id: int
    group: str
    role: str


@auth_events.signed_in.connect
def sync_group_memberships(db: Session, user: User, groups: Sequence[str]) -> None:
    """Makes the user's group-sourced memberships match their groups and the mappings."""
    mappings = db.scalars(select(GroupMapping).where(GroupMapping.group_name.in_(groups)))
    wanted: dict[int, str] = {}
    for mapping in mappings:
        current = wanted.get(mapping.tenant_id)
        if current is None or ROLE_RANK[mapping.role] > ROLE_RANK[current]:
            wanted[mapping.tenant_id] = mapping.role
    existing = {m.tenant_id: m for m in db.scalars(
        select(Membership).where(Membership.user_id == user.id))}
    for tenant_id, stale in existing.items():
        if stale.source == "group" and tenant_id not in wanted:
            _change(db, user, stale, None)
    for tenant_id, role in wanted.items():
        found = existing.get(tenant_id)
        if found is None:
            created = Membership(tenant_id=tenant_id, user_id=user.id, role=role, source="group")
            db.add(created)
            _change(db, user, created, role, created=True)
        elif found.source == "group" and found.role != role:
            _change(db, user, found, role)


def _change(
    db: Session, user: User, membership: Membership, role: str | None, created: bool = False
) -> None:
    before = None if created else {"role": membership.role, "source": "group"}
    if role is None:
        db.delete(membership)
    else:
        membership.role = role
    db.flush()
    audit.record(db, action="membership.sync_from_group", actor_id=user.id,
                 actor_label=user.email, tenant_id=membership.tenant_id,
                 target_type="user", target_id=user.id,
                 target_label=readable.user_label(user.email, user.name), before=before,
                 after={"role": role, "source": "group"} if role else None)
    if not created:
        events.membership_changed.fire(db, events.MembershipChanged(
            membership.tenant_id, user.id, role, events.Actor(user.id, user.email)))


router = APIRouter(prefix="/api/v1/tenants/{tenant}/group-mappings", tags=["members"],
                   route_class=UnitOfWorkRoute)


@router.get("", response_model=list[GroupMappingOut],
            summary="List IdP group mappings", responses=problems(403, 404))
def list_mappings(tenant: str, principal: CurrentPrincipal, db: DbSession) -> list[GroupMappingOut]:
    """The IdP groups mapped to a role in this tenant: members of such a group get the role at
    their next sign-in (tenant admins and platform admins)."""
    row = access.tenant_for(db, principal, tenant, "manage")
    mappings = db.scalars(select(GroupMapping).where(GroupMapping.tenant_id == row.id)
                          .order_by(GroupMapping.id))
    return [GroupMappingOut(id=m.id, group=m.group_name, role=m.role) for m in mappings]


@router.post("", dependencies=PLATFORM_WRITE, status_code=201, response_model=GroupMappingOut,
             summary="Map an IdP group to a role", responses=problems(403, 404, 409))
def create_mapping(
    tenant: str, payload: GroupMappingIn, principal: CurrentPrincipal, db: DbSession
) -> GroupMappingOut:
    """Members of the IdP group get this role in the tenant at their next sign-in; a direct
    membership always wins (platform admins). 409 when the group is mapped already.
    Audited."""
    mapping = add_mapping(db, principal, tenant, payload)
    return GroupMappingOut(id=mapping.id, group=mapping.group_name, role=mapping.role)


@router.delete("/{mapping_id}", dependencies=PLATFORM_WRITE, status_code=204,
               summary="Delete an IdP group mapping", responses=problems(403, 404))
def delete_mapping(
    tenant: str, mapping_id: RowId, principal: CurrentPrincipal, db: DbSession
) -> Response:
    """Removes the mapping; memberships it granted go at once (platform admins). Audited."""
    remove_mapping(db, principal, tenant, mapping_id)
    return Response(status_code=204)


def add_mapping(
    db: Session, principal: Principal, tenant: str, payload: GroupMappingIn
) -> GroupMapping:
    authz.ensure_platform_admin(principal)
    row = access.tenant_for(db, principal, tenant, "manage")
    taken = Conflict(f"group {payload.group!r} is already mapped in {tenant!r}")
    exists = db.scalar(select(GroupMapping).where(
        GroupMapping.tenant_id == row.id, GroupMapping.group_name == payload.group))
    if exists is not None:
        raise taken
    mapping = GroupMapping(tenant_id=row.id, group_name=payload.group, role=payload.role)
    # Two admins mapping one group at once: the second insert loses the unique key (a 500).
    insert_or_conflict(db, mapping, taken)
    audit.record(db, action="group_mapping.create", actor_id=principal.user_id,
                 actor_label=principal.label, tenant_id=row.id, target_type="group_mapping",
                 target_id=mapping.id, target_label=f"group {payload.group} → {row.slug}",
                 after={"group": payload.group, "role": payload.role})
    return mapping


def remove_mapping(db: Session, principal: Principal, tenant: str, mapping_id: RowId) -> None:
    authz.ensure_platform_admin(principal)
    row = access.tenant_for(db, principal, tenant, "manage")
    # As member changes do: kubeconfigs being issued in the tenant wait, then see the change.
    lock_row(db, Tenant, row.id)
    mapping = db.scalar(select(GroupMapping).where(
        GroupMapping.id == mapping_id, GroupMapping.tenant_id == row.id))
    if mapping is None:
        raise NotFound(f"no group mapping {mapping_id} in {tenant!r}")
    audit.record(db, action="group_mapping.delete", actor_id=principal.user_id,
                 actor_label=principal.label, tenant_id=row.id, target_type="group_mapping",
                 target_id=mapping.id, target_label=f"group {mapping.group_name} → {row.slug}",
                 before={"group": mapping.group_name, "role": mapping.role})
    db.delete(mapping)
    db.flush()
    granted = db.scalars(select(User).join(Membership, Membership.user_id == User.id).where(
        Membership.tenant_id == row.id, Membership.source == "group"))
    for user in granted.all():
        sync_group_memberships(db, user, user.groups)
