"""The tenant dashboard: clusters, quota and requests side by side.

It sits above the domains it shows (tenants, quotas, clusters), so none of them imports another
for it. "In use" is the quota's own figure (app.quotas), per class and region.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import APIRouter, Request
from markupsafe import Markup
from starlette.responses import Response

from app.auth.deps import CurrentPrincipal
from app.clusters import service as cluster_service
from app.http.deps import DbSession
from app.http.pagination import PageParams
from app.http.routing import UnitOfWorkRoute
from app.pages.limits import AppSettings, tenant_limits
from app.quotas import service as quota_service
from app.quotas.schemas import TenantQuotaOut
from app.quotas.web import burst_context
from app.tenants import service
from app.web.charts import palette
from app.web.charts.bars import Group, grouped_bars
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)
EVERYTHING = PageParams(limit=200)


@router.get("/t/{tenant}")
def dashboard(request: Request, tenant: str, db: DbSession,
              principal: CurrentPrincipal, settings: AppSettings) -> Response:
    row, can_manage = service.tenant_and_rights(db, principal, tenant)
    quotas = quota_service.tenant_quota(db, principal, tenant, EVERYTHING).items
    return render(request, "tenants/dashboard.html", {
        "tenant": row, "can_manage": can_manage,
        "admins": [] if can_manage else service.admins_to_ask(db, principal, tenant),
        "clusters": cluster_service.list_clusters(db, principal, tenant, EVERYTHING).items,
        "quotas": quotas, "quota_chart": _quota_chart(row.display_name, quotas),
        "requests": quota_service.tenant_requests(db, principal, tenant,
                                                  PageParams(limit=50)).items,
        "limits": tenant_limits(db, principal, settings, tenant).limits,
        **burst_context(db, principal, tenant),
    })


QUOTA_SERIES = (palette.kind("approved"), palette.kind("allocated"), palette.kind("in-use"))


def _quota_chart(tenant: str, quotas: Sequence[TenantQuotaOut]) -> Markup | None:
    """Whole GPUs per class; quota of slices and shares is in the table, in words."""
    quotas = [quota for quota in quotas if quota.unit == "gpu"]
    if not quotas:
        return None
    groups = [Group(_label(q), {"approved": q.approved_gpus, "allocated": q.allocated_gpus,
                                "in-use": round(q.in_use_gpus or 0)})
              for q in quotas]
    description = "; ".join(f"{_label(q)}: {q.approved_gpus} approved, "
                            f"{q.allocated_gpus} allocated to clusters, "
                            f"{_in_use_text(q)}" for q in quotas)
    return grouped_bars("quota-chart", f"GPU quota of {tenant} per GPU class (GPUs)", description,
                        groups, QUOTA_SERIES)


def _label(quota: TenantQuotaOut) -> str:
    """The class, and its region once quota is held in regions."""
    return f"{quota.display_name} · {quota.region}" if quota.region else quota.display_name


def _in_use_text(quota: TenantQuotaOut) -> str:
    if quota.in_use_gpus is None:
        return "in use not sampled yet"
    return f"{quota.in_use_gpus:g} in use, of which {quota.burst_in_use_gpus or 0:g} burst"
