"""HTML: the quota request form, cancelling, and the platform admins' approval queue."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.audit import readable
from app.auth.csrf import STATE_CHANGING
from app.auth.deps import CurrentPrincipal
from app.auth.principal import Principal
from app.authz.routes import PLATFORM_STATE_CHANGING
from app.http.deps import DbSession, RowId
from app.http.pagination import Paging
from app.http.routing import UnitOfWorkRoute
from app.kit.errors import ProblemError
from app.kit.limits import LimitReached
from app.kit.plurals import counted
from app.kit.validation import MAX_ROW_ID
from app.quotas import burst, service
from app.quotas.api import AppSettings
from app.quotas.schemas import (
    MAX_GPUS,
    REQUEST_STATES,
    ApproveIn,
    BurstIn,
    QuotaRequestCreate,
    RejectIn,
)
from app.web import live
from app.web.forms import (
    FieldErrors,
    FormFields,
    Refusal,
    form_payload,
    go_to,
    in_row,
    is_htmx,
    only_touched,
    submitted,
    with_toast,
)
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)
REQUEST_FIELDS = ("gpu_class_id", "gpus", "region", "cpu_millicores", "memory_mib", "reason",
                  "ends_at")


def _request_payload(fields: dict[str, str]) -> dict[str, Any]:
    return form_payload(fields, keys=REQUEST_FIELDS, dates=("ends_at",),
                        integers=("gpu_class_id", "gpus", "cpu_millicores", "memory_mib"))


def _request_form(request: Request, db: DbSession, principal: Principal, tenant: str,
                  fields: dict[str, str], errors: FieldErrors, status_code: int,
                  whole_page: bool = False, warnings: list[str] | None = None) -> Response:
    template = "quotas/request_page.html" if whole_page else "quotas/_request_form.html"
    classes = service.classes_to_request(db, principal, tenant)
    return render(request, template, {
        "tenant_slug": tenant, "classes": classes,
        "mig_only": service.mig_only_classes(db, classes),
        "regions": service.regions_to_request(db),
        "form": fields, "errors": errors, "checked": not errors and bool(fields),
        "warnings": warnings or [],
    }, status_code=status_code)


def _check(db: DbSession, principal: Principal, tenant: str,
           fields: dict[str, str]) -> QuotaRequestCreate:
    """The request if it can be sent; a refusal if not."""
    payload = QuotaRequestCreate.model_validate(_request_payload(fields))
    service.check_request(db, principal, tenant, payload)
    return payload


def _warnings(db: DbSession, principal: Principal, tenant: str,
              typed: dict[str, Any]) -> list[str]:
    class_id, gpus, region = typed.get("gpu_class_id"), typed.get("gpus"), typed.get("region")
    if not (isinstance(class_id, int) and isinstance(gpus, int) and 0 < class_id <= MAX_ROW_ID
            and 0 < gpus <= MAX_GPUS):
        return []
    return service.request_warnings(db, principal, tenant, class_id, gpus, str(region or ""))


@router.get("/t/{tenant}/quota-requests/new")
def new_request(request: Request, tenant: str, db: DbSession,
                principal: CurrentPrincipal) -> Response:
    return _request_form(request, db, principal, tenant, {}, {}, 200, whole_page=True)


@router.post("/t/{tenant}/quota-requests/validate", dependencies=STATE_CHANGING)
def validate_request(request: Request, tenant: str, db: DbSession,
                     principal: CurrentPrincipal, fields: FormFields) -> Response:
    warnings = _warnings(db, principal, tenant, _request_payload(fields))

    def checked() -> Response:
        _check(db, principal, tenant, fields)
        return _request_form(request, db, principal, tenant, fields, {}, 200,
                             warnings=warnings)

    def refused(refusal: Refusal) -> Response:
        errors = only_touched(request, fields, refusal.errors)
        return _request_form(request, db, principal, tenant, fields, errors,
                             422 if errors else 200, warnings=warnings)

    return submitted(checked, refused)


@router.post("/t/{tenant}/quota-requests", dependencies=STATE_CHANGING)
def create_request(request: Request, tenant: str, db: DbSession, principal: CurrentPrincipal,
                   settings: AppSettings, fields: FormFields) -> Response:
    def create() -> Response:
        payload = _check(db, principal, tenant, fields)
        created = service.create_request(db, principal, settings, tenant, payload)
        return go_to(request, f"/t/{tenant}",
                     toast=" ".join(["Quota request sent: a platform admin decides it.",
                                     *created.warnings]))

    def refused(refusal: Refusal) -> Response:
        errors = ({"gpus": refusal.detail} if isinstance(refusal.problem, LimitReached)
                  else refusal.errors)
        return _request_form(request, db, principal, tenant, fields, errors, refusal.status,
                             whole_page=not is_htmx(request))

    return submitted(create, refused)


@router.post("/t/{tenant}/quota-requests/{request_id}/cancel", dependencies=STATE_CHANGING)
def cancel_request(request: Request, tenant: str, request_id: RowId, db: DbSession,
                   principal: CurrentPrincipal) -> Response:
    item = service.cancel_request(db, principal, tenant, request_id)
    if not is_htmx(request):
        return go_to(request, f"/t/{tenant}")
    response = render(request, "quotas/_request_row.html",
                      {"item": item, "tenant_slug": tenant, "can_manage": True})
    return with_toast(response, f"Request for {counted(item.gpus, 'GPU')} cancelled.")


# ----- burst


def burst_context(db: DbSession, principal: Principal, tenant: str) -> dict[str, Any]:
    """What ``quotas/_burst.html`` shows (the dashboard includes it); the form starts from
    the values set apart from the tier, so that sending it again keeps them."""
    current = burst.burst_for(db, principal, tenant)
    return {"burst": current, "tiers": list(burst.TIERS), "tenant_slug": tenant,
            "is_platform_admin": principal.is_platform_admin, "errors": {},
            "form": {name: str(getattr(current, name)) for name in current.overrides}}


@router.post("/admin/tenants/{tenant}/burst-policy", dependencies=PLATFORM_STATE_CHANGING)
def set_burst(request: Request, tenant: str, db: DbSession, principal: CurrentPrincipal,
              fields: FormFields) -> Response:
    payload = form_payload(fields, keys=("tier", *burst.FIELDS), integers=burst.FIELDS)

    def choose() -> Response:
        burst_in = BurstIn.model_validate(payload)
        burst.set_burst(db, principal, tenant, burst_in.tier, burst_in.own_values())
        if not is_htmx(request):
            return go_to(request, f"/t/{tenant}")
        response = render(request, "quotas/_burst.html", burst_context(db, principal, tenant))
        return with_toast(response, f"Burst of {tenant} set: its queues follow within seconds.")

    return submitted(choose, lambda refusal: render(
        request, "quotas/_burst.html",
        {**burst_context(db, principal, tenant), "form": fields, "errors": refusal.errors},
        status_code=refusal.status))


# ----- the approval queue


@router.get("/admin/quota-requests")
def admin_queue(request: Request, db: DbSession, principal: CurrentPrincipal, paging: Paging,
                state: str = "pending") -> Response:
    chosen = state if state in REQUEST_STATES else None
    page = service.queue(db, principal, paging, chosen)
    template = "admin/_queue_table.html" if is_htmx(request) else "admin/quota_requests.html"
    return render(request, template,
                  {"items": page.items, "next_cursor": page.next_cursor,
                   "cursor": paging.cursor or "", "state": chosen or "all",
                   "states": REQUEST_STATES})


@router.get(live.PREFIX + "/admin/quota-requests")
async def queue_stream(request: Request, principal: CurrentPrincipal) -> Response:
    """``changed`` whenever a request arrives, is cancelled or decided."""
    return await live.event_stream(request, lambda db: service.queue_version(db, principal))


def _decided(request: Request, db: DbSession, principal: Principal, request_id: RowId,
             decide: Callable[[], Any]) -> Response:
    def decided() -> Response:
        item = decide()
        if not is_htmx(request):
            return go_to(request, "/admin/quota-requests")
        response = render(request, "admin/_queue_row.html", {"item": item, "error": ""})
        named = readable.quota_request_label(item.gpu_class_name, item.id, item.tenant)
        return with_toast(response, f"{named} {item.state}.")

    def row_refused(refusal: Refusal) -> Response:
        current = service.get_queue_item(db, principal, request_id)
        return render(request, "admin/_queue_row.html",
                      {"item": current, "error": refusal.detail,
                       "needs_overcommit": _needs_overcommit(refusal.problem)},
                      status_code=refusal.status)

    return submitted(decided, in_row(request, row_refused))


def _needs_overcommit(problem: ProblemError) -> bool:
    return any(e.get("field") == "overcommit" for e in problem.errors)


@router.post("/admin/quota-requests/{request_id}/approve", dependencies=PLATFORM_STATE_CHANGING)
def approve(request: Request, request_id: RowId, db: DbSession, principal: CurrentPrincipal,
            fields: FormFields) -> Response:
    def decide() -> Any:
        payload = form_payload(fields, keys=("gpus", "note", "overcommit"),
                               integers=("gpus",), booleans=("overcommit",))
        return service.approve(db, principal, request_id, ApproveIn.model_validate(payload))

    return _decided(request, db, principal, request_id, decide)


@router.post("/admin/quota-requests/{request_id}/reject", dependencies=PLATFORM_STATE_CHANGING)
def reject(request: Request, request_id: RowId, db: DbSession, principal: CurrentPrincipal,
           fields: FormFields) -> Response:
    def decide() -> Any:
        payload = form_payload(fields, keys=("note",))
        return service.reject(db, principal, request_id, RejectIn.model_validate(payload))

    return _decided(request, db, principal, request_id, decide)
