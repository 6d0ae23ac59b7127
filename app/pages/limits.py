"""What one tenant or user may hold at once, with the current counts: the tenant's dashboard
and ``GET /api/v1/tenants/{tenant}/limits``.

It sits above the domains that enforce each limit (quotas, clusters, auth): each of them counts
its own rows; this module only puts the figures side by side.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from app.auth import repository as auth_repository
from app.auth.deps import CurrentPrincipal
from app.auth.principal import Principal
from app.auth.token_service import live_tokens_limit
from app.clusters import repository as clusters_repository
from app.clusters.limits import clusters_limit
from app.database.core import utcnow
from app.http.deps import DbSession, get_settings_dep
from app.http.problems import problems
from app.http.routing import UnitOfWorkRoute
from app.kit.config import Settings
from app.kit.limits import Limit
from app.quotas import repository as quotas_repository
from app.quotas.limits import pending_requests_limit
from app.tenants.access import tenant_for

router = APIRouter(prefix="/api/v1/tenants", tags=["tenants"], route_class=UnitOfWorkRoute)
AppSettings = Annotated[Settings, Depends(get_settings_dep)]


class LimitOut(BaseModel):
    key: str = Field(description="`pending_quota_requests`, `clusters`, `live_tokens` or "
                                 "`token_lifetime_days`")
    description: str
    per: str = Field(description="`tenant`, or `user` (you, the caller)")
    maximum: int
    current: int | None = Field(description="how many there are now; none for a lifetime")
    setting: str = Field(description="the operator's setting that sets it")


class TenantLimitsOut(BaseModel):
    tenant: str
    limits: list[LimitOut]


def _out(limit: Limit, per: str, current: int | None, description: str) -> LimitOut:
    return LimitOut(key=limit.key, description=description, per=per, maximum=limit.maximum,
                    current=current, setting=limit.setting)


def tenant_limits(db: Session, principal: Principal, settings: Settings,
                  slug: str) -> TenantLimitsOut:
    tenant = tenant_for(db, principal, slug, "read")
    lifetime = Limit("token_lifetime_days", "days", "PORTAL_TOKEN_MAX_LIFETIME_DAYS",
                     settings.token_max_lifetime_days)
    return TenantLimitsOut(tenant=tenant.slug, limits=[
        _out(pending_requests_limit(settings), "tenant",
             quotas_repository.pending_count(db, tenant.id),
             "quota requests waiting for a platform admin's decision"),
        _out(clusters_limit(settings), "tenant", clusters_repository.cluster_count(db, tenant.id),
             "virtual clusters, those being deleted included"),
        _out(live_tokens_limit(settings), "user",
             auth_repository.live_token_count(db, principal.user_id, utcnow()),
             "your API tokens that are neither revoked nor expired"),
        _out(lifetime, "user", None, "the longest lifetime of a new API token, in days"),
    ])


@router.get("/{tenant}/limits", response_model=TenantLimitsOut,
            summary="Get a tenant's limits", responses=problems(404))
def get_limits(tenant: str, db: DbSession, principal: CurrentPrincipal,
               settings: AppSettings) -> TenantLimitsOut:
    """What the tenant may hold at once (pending quota requests, clusters) and what you may
    (live API tokens, a token's lifetime), each with its maximum, the current count and the
    operator's setting. A create past a limit is a 409 naming the limit and the count. Any
    member may look."""
    return tenant_limits(db, principal, settings, tenant)
