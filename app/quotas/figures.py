"""A tenant's quota rows as the API, the dashboard and the create form show them: each figure
of the one accounting (``app.accounting.standing``) with what the hosts report in use."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.accounting.standing import WHOLE, Standing
from app.auth.principal import Principal
from app.http.pagination import PageParams
from app.kit.gpu_units import WHOLE_GPUS, GrantUnit, share_text, steps, words
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
    """``TenantQuotaOut``'s fields of a row of ``repository.quota_rows_query``: a row of slices
    or a share has its figures in ``amount`` and the fields after it, its ``*_gpus`` are 0."""
    if row.unit != WHOLE:
        return _parts_fields(row)
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
        **_unit_fields(row, WHOLE_GPUS, int(row.allocated), held.shared_left),
    }


def _parts_fields(row: Any) -> dict[str, Any]:
    unit = GrantUnit(row.unit, row.mig_profile)
    held = Standing(int(row.amount), 0, int(row.shared_held or 0), 0, 0)
    return {
        "gpu_class_id": row.gpu_class_id, "gpu_class": row.product,
        "display_name": row.display_name, "region": row.region, "approved_gpus": 0,
        "allocated_gpus": 0, "in_use_gpus": _gpus(row.in_use),
        "burst_in_use_gpus": _gpus(row.burst), "dedicated_gpus": 0, "shared_pool_gpus": 0,
        "shared_pool_allocated_gpus": 0, "dedicated_allocated_gpus": 0,
        "private_nodes_allocated_gpus": 0, "shared_pool_left_gpus": 0, "dedicated_left_gpus": 0,
        "over_quota_gpus": 0, "cpu_millicores": row.cpu_millicores,
        "memory_mib": row.memory_mib,
        **_unit_fields(row, unit, int(row.allocated or 0), held.shared_left),
    }


def _unit_fields(row: Any, unit: GrantUnit, allocated: int, left: int) -> dict[str, Any]:
    """The unit fields at the end of a ``TenantQuotaOut``."""
    amount = int(row.amount)
    return {"unit": unit.kind, "mig_profile": unit.profile, "amount": amount,
            "slices": amount if unit.kind == "mig" else None,
            "gpu_share": share_text(amount) if unit.kind == "share" else None,
            "grant": words(unit, amount, row.display_name), "allocated_amount": allocated,
            "allocated": steps(unit, allocated),
            "left_amount": left, "left": steps(unit, left)}


def standing_of(row: Any) -> Standing:
    """The standing of a row with ``gpus`` and ``standing_columns``."""
    return Standing(int(row.gpus), int(row.dedicated or 0), int(row.shared_held or 0),
                    int(row.dedicated_held or 0), int(row.private_held or 0))


def _gpus(summed: Any) -> float | None:
    return None if summed is None else float(summed)
