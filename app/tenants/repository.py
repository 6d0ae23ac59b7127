"""SQL for tenants and memberships. Tenant visibility itself comes from ``app.authz``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, bindparam, func, select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.database.prepared import OneOf, Prepared
from app.http.pagination import KeysetPage, PageParams
from app.tenants.models import Membership, Tenant

# Built once: who-am-I asks it on every call, and building and keying it cost more than it does.
_SLUGS = Prepared(select(Tenant.id, Tenant.slug).where(OneOf(Tenant.id, "ids")))


def slugs_of(db: Session, tenant_ids: Sequence[int]) -> dict[int, str]:
    return {row.id: row.slug for row in _SLUGS.rows(db, {"ids": list(tenant_ids)})}


def tenant_by_slug(db: Session, slug: str) -> Tenant | None:
    return db.scalar(select(Tenant).where(Tenant.slug == slug))


def matching(query: Select[Tenant], text: str | None) -> Select[Tenant]:
    """Tenants whose slug or display name contains ``text`` (any case); all without one."""
    if not text:
        return query
    return query.where(Tenant.slug.icontains(text, autoescape=True)
                       | Tenant.display_name.icontains(text, autoescape=True))


def listed(query: Select[Tenant]) -> Select[*tuple[Any, ...]]:
    """``query``'s tenants as the columns a list shows, not entities."""
    return query.with_only_columns(Tenant.id, Tenant.slug, Tenant.display_name, Tenant.state,
                                   Tenant.created_at)


# One per visibility statement (``access.tenants_visible_bound``), built on first use.
_LISTED_PAGES: dict[Select[Tenant], KeysetPage] = {}


def listed_page(db: Session, visible: Select[Tenant], values: dict[str, Any],
                params: PageParams) -> tuple[Sequence[Any], str | None]:
    """A page of ``listed(visible)``, its statement built once (``KeysetPage``): building it
    and its cache key cost about as much as running it."""
    page = _LISTED_PAGES.get(visible)
    if page is None:
        page = _LISTED_PAGES[visible] = KeysetPage(listed(visible), Tenant.id)
    return page.rows(db, params, values)


def members_query(tenant_id: int) -> Select[Membership]:
    return select(Membership).where(Membership.tenant_id == tenant_id)


def member_rows_query(tenant_id: int) -> Select[Membership, User]:
    """A tenant's memberships with their users: a page in one statement."""
    return members_query(tenant_id).add_columns(User).join(User, User.id == Membership.user_id)


def membership_in(db: Session, tenant_id: int, membership_id: int) -> Membership | None:
    return db.scalar(
        select(Membership)
        .where(Membership.tenant_id == tenant_id, Membership.id == membership_id)
        .execution_options(populate_existing=True)
    )


def membership_of(db: Session, tenant_id: int, user_id: int) -> Membership | None:
    return db.scalar(
        select(Membership).where(Membership.tenant_id == tenant_id, Membership.user_id == user_id)
    )


_ADMIN_CONTACTS = Prepared(
    select(User.name, User.email).join(Membership, Membership.user_id == User.id)
    .where(Membership.tenant_id == bindparam("tenant_id"), Membership.role == "admin")
    .order_by(User.email))


def admin_contacts(db: Session, tenant_id: int) -> list[tuple[str | None, str]]:
    """(name, email) of the tenant's admins."""
    return [(name, email) for name, email in _ADMIN_CONTACTS.rows(db, {"tenant_id": tenant_id})]


def admin_count(db: Session, tenant_id: int) -> int:
    query = select(func.count()).select_from(Membership).where(
        Membership.tenant_id == tenant_id, Membership.role == "admin"
    )
    return int(db.scalar(query) or 0)


def users_by_id(db: Session, user_ids: list[int]) -> dict[int, User]:
    return {user.id: user for user in db.scalars(select(User).where(User.id.in_(user_ids)))}
