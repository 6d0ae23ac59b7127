"""A tenant's quota rows as the API, the dashboard and the create form show them: each figure
of the one accounting (``app.accounting.standing``) with what the hosts report in use."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.accounting.standing import Standing
from app.auth.principal import Principal
from app.http.pagination import PageParams
from app.quotas import repository
from app.tenants.access import tenant_for


def tenant_quota_fields(db: Session, principal: Principal, slug: str, params: PageParams,
                        ) -> tuple[list[dict[str, Any]], str | None]:
    """``tenant_quota``'s page as ``TenantQuotaOut`` fields, in its order and types, for
    ``page_response``."""
    tenant = tenant_for(db, principal, slug)
    rows, cursor = repository.quota_page(db, tenant.id, params)
    return [_quota_fields(row) for row in rows], cursor


def _quota_fields(row: Any) -> dict[str, Any]:
    """``TenantQuotaOut``'s fields of a row of ``repository.quota_rows_query``."""
    held = standing_of(row)
    return {
        "gpu_class_id": row.gpu_class_id, "gpu_class": row.product,
        "display_name": row.display_name, "region": row.region, "approved_gpus": row.gpus,
        "allocated_gpus": int(row.allocated), "in_use_gpus": _gpus(row.in_use),
        "burst_in_use_gpus": _gpus(row.burst), "dedicated_gpus": held.dedicated,
        "shared_pool_gpus": held.shared_guarantee, "shared_pool_allocated_gpus": held.shared_held,
        "dedicated_allocated_gpus": held.dedicated_held,
        "private_nodes_allocated_gpus": held.private_held,
        "shared_pool_left_gpus": held.shared_left, "dedicated_left_gpus": held.dedicated_left,
        "over_quota_gpus": held.over,
        "cpu_millicores": row.cpu_millicores, "memory_mib": row.memory_mib,
    }


def standing_of(row: Any) -> Standing:
    """The standing of a row with ``gpus`` and ``standing_columns``."""
    return Standing(int(row.gpus), int(row.dedicated or 0), int(row.shared_held or 0),
                    int(row.dedicated_held or 0), int(row.private_held or 0))


def _gpus(summed: Any) -> float | None:
    return None if summed is None else float(summed)
