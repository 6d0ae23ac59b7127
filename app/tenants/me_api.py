"""REST: the caller and the tenants they belong to."""

from __future__ import annotations

from fastapi import APIRouter

from app.auth.deps import CurrentPrincipal
from app.auth.schemas import MembershipOut, MeOut
from app.http.deps import DbSession
from app.http.routing import UnitOfWorkRoute
from app.tenants import repository

router = APIRouter(prefix="/api/v1", tags=["me"], route_class=UnitOfWorkRoute)


@router.get("/me", response_model=MeOut, summary="Who am I")
def me(principal: CurrentPrincipal, db: DbSession) -> MeOut:
    """The caller: id, email and name, whether they are a platform admin, and their role in each
    tenant they belong to. A quick way to check that a token works."""
    slugs = repository.slugs_of(db, list(principal.roles))
    return MeOut(
        id=principal.user.id,
        email=principal.user.email,
        name=principal.user.name,
        platform_admin=principal.is_platform_admin,
        memberships=[
            MembershipOut(tenant=slugs[tenant_id], role=role)
            for tenant_id, role in sorted(principal.roles.items())
        ],
    )
