"""Tenant and membership rules. Callers own the transaction; every change is audited."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.audit import readable
from app.audit import service as audit
from app.auth import service as auth_service
from app.auth.models import User
from app.auth.principal import Principal
from app.authz import ensure_allowed, ensure_platform_writer
from app.database.concurrency import insert_or_conflict, lock_row
from app.http.pagination import Page, PageParams, paginate_rows
from app.kit.errors import Conflict, NotFound, ProblemError
from app.tenants import events, repository
from app.tenants.access import (
    Contact,
    admins_of,
    tenant_for,
    tenants_visible_bound,
    tenants_visible_to,
)
from app.tenants.models import Membership, Tenant
from app.tenants.schemas import (
    MemberCreate,
    MemberOut,
    MemberUpdate,
    TenantCreate,
    TenantOut,
    TenantUpdate,
)


def tenant_out(principal: Principal, tenant: Tenant) -> TenantOut:
    return TenantOut.model_validate(tenant_fields(principal, tenant))


def tenant_fields(principal: Principal, tenant: Any) -> dict[str, Any]:
    """``TenantOut``'s fields, from a tenant or a row of its columns, as plain values."""
    return {"id": tenant.id, "slug": tenant.slug, "display_name": tenant.display_name,
            "state": tenant.state, "created_at": tenant.created_at,
            "role": principal.roles.get(tenant.id)}


def _audit(db: Session, principal: Principal, action: str, tenant: Tenant, target_type: str,
           target_id: int | str, before: dict[str, Any] | None = None,
           after: dict[str, Any] | None = None, *, member_email: str = "") -> None:
    label = (readable.member_label(member_email, tenant.slug) if member_email
             else readable.tenant_label(tenant.slug, tenant.display_name))
    audit.record(db, action=action, actor_id=principal.user_id, actor_label=principal.label,
                 tenant_id=tenant.id, target_type=target_type, target_id=target_id,
                 target_label=label, before=before, after=after)


def list_tenants(db: Session, principal: Principal, params: PageParams,
                 search: str | None = None) -> Page[TenantOut]:
    items, cursor = list_tenant_fields(db, principal, params, search)
    return Page(items=[TenantOut.model_validate(item) for item in items], next_cursor=cursor)


def list_tenant_fields(db: Session, principal: Principal, params: PageParams,
                       search: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the tenants the caller sees as ``TenantOut`` fields, read as plain columns."""
    if search:
        query = repository.listed(repository.matching(tenants_visible_to(principal), search))
        rows, cursor = paginate_rows(db, query, Tenant.id, params)
    else:
        visible, values = tenants_visible_bound(principal)
        rows, cursor = repository.listed_page(db, visible, values, params)
    return [tenant_fields(principal, row) for row in rows], cursor


def get_tenant(db: Session, principal: Principal, slug: str) -> TenantOut:
    return tenant_out(principal, tenant_for(db, principal, slug))


def tenant_and_rights(db: Session, principal: Principal, slug: str) -> tuple[TenantOut, bool]:
    """The tenant and whether the caller may manage it (members, quota requests) right now."""
    tenant = tenant_for(db, principal, slug)
    try:
        ensure_allowed(principal, tenant, "manage")
    except ProblemError:
        return tenant_out(principal, tenant), False
    return tenant_out(principal, tenant), True


def admins_to_ask(db: Session, principal: Principal, slug: str) -> list[Contact]:
    """Whom a member asks for what their role does not allow: the tenant's admins, shown only
    to those who see the tenant."""
    return admins_of(db, tenant_for(db, principal, slug))


def create_tenant(db: Session, principal: Principal, payload: TenantCreate) -> TenantOut:
    ensure_platform_writer(principal)
    taken = Conflict(f"a tenant with the slug {payload.slug!r} exists already",
                     errors=[{"field": "slug", "message": "this slug is taken"}])
    if repository.tenant_by_slug(db, payload.slug) is not None:
        raise taken
    tenant = Tenant(slug=payload.slug, display_name=payload.display_name, state="active")
    insert_or_conflict(db, tenant, taken)
    _audit(db, principal, "tenant.create", tenant, "tenant", tenant.slug,
           after={"slug": tenant.slug, "display_name": tenant.display_name, "state": "active"})
    if payload.admin_email:
        _add_membership(db, principal, tenant, MemberCreate(email=payload.admin_email,
                                                            role="admin"))
    return tenant_out(principal, tenant)


def update_tenant(
    db: Session, principal: Principal, slug: str, payload: TenantUpdate
) -> TenantOut:
    """Rename, suspend or reactivate; a suspended tenant is read-only for its members."""
    ensure_platform_writer(principal)
    tenant = tenant_for(db, principal, slug, "manage")
    before = {"display_name": tenant.display_name, "state": tenant.state}
    if payload.display_name is not None:
        tenant.display_name = payload.display_name
    if payload.state is not None:
        tenant.state = payload.state
    after = {"display_name": tenant.display_name, "state": tenant.state}
    if after != before:
        _audit(db, principal, "tenant.update", tenant, "tenant", tenant.slug, before, after)
        db.flush()
    if before["state"] != "suspended" and tenant.state == "suspended":
        events.tenant_suspended.fire(db, events.TenantSuspended(tenant.id, _actor(principal)))
    return tenant_out(principal, tenant)


def _member_out(db: Session, membership: Membership) -> MemberOut:
    return _member_of(membership, repository.users_by_id(db, [membership.user_id])[
        membership.user_id])


def _member_of(membership: Membership, user: User) -> MemberOut:
    return MemberOut(id=membership.id, user_id=user.id, email=user.email, name=user.name,
                     role=membership.role, source=membership.source,
                     pending=user.subject is None, created_at=membership.created_at)


def list_members(
    db: Session, principal: Principal, slug: str, params: PageParams
) -> Page[MemberOut]:
    tenant = tenant_for(db, principal, slug)
    rows, cursor = paginate_rows(db, repository.member_rows_query(tenant.id), Membership.id,
                                 params)
    return Page(items=[_member_of(m, user) for m, user in rows], next_cursor=cursor)


def add_member(db: Session, principal: Principal, slug: str, payload: MemberCreate) -> MemberOut:
    """Adds a user by email; one who never signed in stays pending until their first sign-in."""
    tenant = tenant_for(db, principal, slug, "manage")
    return _member_out(db, _add_membership(db, principal, tenant, payload))


def _add_membership(
    db: Session, principal: Principal, tenant: Tenant, payload: MemberCreate
) -> Membership:
    user = auth_service.user_for_email(db, payload.email, actor_id=principal.user_id,
                                       actor_label=principal.label)
    taken = Conflict(f"{payload.email} is a member of {tenant.slug} already",
                     errors=[{"field": "email", "message": "already a member"}])
    if repository.membership_of(db, tenant.id, user.id) is not None:
        raise taken
    membership = Membership(tenant_id=tenant.id, user_id=user.id, role=payload.role)
    insert_or_conflict(db, membership, taken)
    _audit(db, principal, "membership.create", tenant, "membership", membership.id,
           after={"email": user.email, "user_id": user.id, "role": payload.role},
           member_email=user.email)
    return membership


def _locked_membership(
    db: Session, principal: Principal, slug: str, member_id: int
) -> tuple[Tenant, Membership]:
    """The membership, read after locking its tenant so that admin counts cannot race."""
    tenant = tenant_for(db, principal, slug, "manage")
    lock_row(db, Tenant, tenant.id)
    membership = repository.membership_in(db, tenant.id, member_id)
    if membership is None:
        raise NotFound(f"no member {member_id} in {slug!r}")
    return tenant, membership


def _ensure_keeps_an_admin(db: Session, tenant: Tenant, membership: Membership) -> None:
    if membership.role == "admin" and repository.admin_count(db, tenant.id) <= 1:
        raise Conflict(f"{tenant.slug} must keep at least one admin: make someone else "
                       "admin first", errors=[{"field": "role", "message": "the last admin"}])


def change_role(
    db: Session, principal: Principal, slug: str, member_id: int, payload: MemberUpdate
) -> MemberOut:
    tenant, membership = _locked_membership(db, principal, slug, member_id)
    if payload.role != membership.role:
        if payload.role != "admin":
            _ensure_keeps_an_admin(db, tenant, membership)
        before = {"role": membership.role}
        membership.role = payload.role
        user = db.get(User, membership.user_id)
        _audit(db, principal, "membership.update", tenant, "membership", membership.id,
               before, {"role": membership.role}, member_email=user.email if user else "")
        db.flush()
        events.membership_changed.fire(db, events.MembershipChanged(
            tenant.id, membership.user_id, membership.role, _actor(principal)))
    return _member_out(db, membership)


def remove_member(db: Session, principal: Principal, slug: str, member_id: int) -> None:
    """Access ends at the member's next request: roles are read afresh on every request."""
    tenant, membership = _locked_membership(db, principal, slug, member_id)
    _ensure_keeps_an_admin(db, tenant, membership)
    before = _member_out(db, membership).model_dump(mode="json", include={"email", "role",
                                                                         "user_id"})
    db.delete(membership)
    db.flush()
    _audit(db, principal, "membership.delete", tenant, "membership", member_id, before=before,
           member_email=before["email"])
    on_member_removed(db, principal, tenant, membership.user_id)


def on_member_removed(db: Session, principal: Principal, tenant: Tenant, user_id: int) -> None:
    """What else ends with a membership (its kubeconfig grants) follows from the hook.

    Web sessions are left alone: the user may belong to other tenants, and roles are re-read
    on every request, so the removal already takes effect.
    """
    events.membership_changed.fire(db, events.MembershipChanged(
        tenant.id, user_id, None, _actor(principal)))


def _actor(principal: Principal) -> events.Actor:
    return events.Actor(principal.user_id, principal.label)
