"""HTML: the quota request form, cancelling, and the platform admins' approval queue."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.responses import Response

from app.audit import readable
from app.auth.csrf import STATE_CHANGING
from app.auth.deps import CurrentPrincipal
from app.auth.principal import Principal
from app.authz.routes import PLATFORM_STATE_CHANGING
from app.http.deps import DbSession, RowId
from app.http.pagination import Paging
from app.http.routing import UnitOfWorkRoute
from app.kit.errors import ProblemError, ValidationFailed
from app.kit.gpu_units import WHOLE_GPUS
from app.kit.limits import LimitReached
from app.kit.plurals import counted
from app.kit.validation import MAX_ROW_ID
from app.quotas import burst, service
from app.quotas.api import AppSettings
from app.quotas.room import parse_offer
from app.quotas.schemas import (
    MAX_GPUS,
    REQUEST_STATES,
    ApproveIn,
    BurstIn,
    QuotaRequestCreate,
    RejectIn,
)
from app.quotas.unit_form import in_unit, on_the_form
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
    said_once,
    submitted,
    validation_errors,
    with_toast,
)
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)
REQUEST_FIELDS = ("gpu_class_id", "gpus", "region", "cpu_millicores", "memory_mib", "reason",
                  "ends_at")


def _request_payload(fields: dict[str, str]) -> dict[str, Any]:
    offered = parse_offer(fields.get("gpu_class_id", "").strip())
    unit = offered[1] if offered is not None else WHOLE_GPUS
    chosen = {**fields, "gpu_class_id": offered[0] if offered is not None else
              fields.get("gpu_class_id", "")}
    payload = form_payload(chosen, keys=REQUEST_FIELDS, dates=("ends_at",),
                           integers=("gpu_class_id", "gpus", "cpu_millicores", "memory_mib"))
    return in_unit(payload, unit)


def _request_form(request: Request, db: DbSession, principal: Principal, tenant: str,
                  fields: dict[str, str], errors: FieldErrors, status_code: int,
                  whole_page: bool = False, warnings: list[str] | None = None) -> Response:
    template = "quotas/request_page.html" if whole_page else "quotas/_request_form.html"
    classes = service.classes_to_request(db, principal, tenant)
    offers = service.offers(db, classes)
    value = fields.get("gpu_class_id", "")
    return render(request, template, {
        "tenant_slug": tenant, "offers": offers,
        "chosen": next((offer for offer in offers if offer.value == value), None),
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
        errors = only_touched(request, fields, on_the_form(refusal.errors))
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
                                     *created.warnings]),
                     focus=f"quota-request-{created.id}")

    def refused(refusal: Refusal) -> Response:
        errors = ({"gpus": refusal.detail} if isinstance(refusal.problem, LimitReached)
                  else on_the_form(refusal.errors))
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
    what = counted(item.gpus, "GPU") if item.unit == "gpu" else item.grant
    return with_toast(response, f"Request for {what} cancelled.")


# ----- burst

# Each number of the burst form: its least and most value and its unit, as the form says them.
BURST_RANGES: dict[str, tuple[int, int, str]] = {
    "burst_gpus": (0, burst.MOST["burst_gpus"], "GPUs"),
    "over_quota_weight": (0, burst.MOST["over_quota_weight"], ""),
    "reclaim_min_runtime_s": (0, burst.MOST["reclaim_min_runtime_s"], "seconds"),
    "preempt_min_runtime_s": (0, burst.MOST["preempt_min_runtime_s"], "seconds"),
}
NO_CEILING = "no_ceiling"
NEGATIVE_CEILING = 'at least 0 GPUs; for no ceiling, tick "No ceiling"'


def burst_context(db: DbSession, principal: Principal, tenant: str) -> dict[str, Any]:
    """What ``quotas/_burst.html`` shows (the dashboard includes it); the form starts from
    the values set apart from the tier, so that sending it again keeps them, and from the
    ceiling as it is ("No ceiling" ticked when there is none)."""
    current = burst.burst_for(db, principal, tenant)
    form = {name: str(getattr(current, name)) for name in current.overrides}
    if current.burst_gpus == burst.UNLIMITED:
        form.pop("burst_gpus", None)
        form[NO_CEILING] = "on"
    return {**_burst_words(), "burst": current, "tenant_slug": tenant,
            "is_platform_admin": principal.is_platform_admin, "errors": {}, "form": form,
            "effect": current}


def _burst_words() -> dict[str, Any]:
    return {"tiers": list(burst.TIERS), "tier_meanings": burst.TIER_MEANINGS,
            "field_names": burst.FIELD_NAMES, "ranges": BURST_RANGES}


def _burst_choice(fields: dict[str, str]) -> tuple[str, dict[str, int | None]]:
    """The form's tier and values apart from it, as the API takes them. No ceiling is never
    saved unsaid: it is the "No ceiling" box (the API's -1), and a tier without a ceiling is
    refused until the box says so, or a number of GPUs caps it."""
    payload = form_payload(fields, keys=("tier", *burst.FIELDS), integers=burst.FIELDS)
    chosen = BurstIn.model_validate(payload)
    own = chosen.own_values()
    no_ceiling = fields.get(NO_CEILING, "").lower() in ("on", "true")
    ceiling, tier_has_none = own["burst_gpus"], burst.TIERS[chosen.tier].burst_gpus < 0
    if ceiling is not None and ceiling < 0:
        _refuse_ceiling(NEGATIVE_CEILING)
    if no_ceiling and ceiling is not None:
        _refuse_ceiling(f"either at most {ceiling} GPUs or no ceiling: not both")
    if no_ceiling:
        own["burst_gpus"] = None if tier_has_none else burst.UNLIMITED
    elif ceiling is None and tier_has_none:
        _refuse_ceiling(f'the {chosen.tier} tier has no ceiling: tick "No ceiling" to save it '
                        "so, or give at most how many GPUs")
    return chosen.tier, own


def _refuse_ceiling(message: str) -> None:
    raise ValidationFailed(message, errors=[{"field": "burst_gpus", "message": message}])


def _burst_errors(error: ValidationError) -> FieldErrors:
    """The schema's refusals, a number's said with its range and unit ("at most 100000
    GPUs", not "far too large a number")."""
    errors = validation_errors(error)
    for item in error.errors():
        name = str(item["loc"][0]) if item["loc"] else ""
        if name in BURST_RANGES:
            errors[name] = _out_of_range(name, item.get("input"))
    return errors


def _out_of_range(name: str, given: object) -> str:
    least, most, unit = BURST_RANGES[name]
    unit = f" {unit}" if unit else ""
    digits = str(given).strip()
    if isinstance(given, int) or re.fullmatch(r"[+-]?\d+", digits):
        # Told apart by its sign: a number of thousands of digits is no int() to make.
        if not digits.startswith("-"):
            return f"at most {most}{unit}"
        return NEGATIVE_CEILING if name == "burst_gpus" else f"at least {least}{unit}"
    return f"a whole number{unit and ' of' + unit}, from {least} to {most}"


def _burst_form(request: Request, db: DbSession, principal: Principal, tenant: str,
                fields: dict[str, str], errors: FieldErrors, status_code: int,
                effect: burst.Burst | None = None) -> Response:
    return render(request, "quotas/_burst.html", {
        **burst_context(db, principal, tenant), "form": fields, "errors": said_once(errors),
        "effect": effect}, status_code=status_code)


@router.post("/admin/tenants/{tenant}/burst-policy/check",
             dependencies=PLATFORM_STATE_CHANGING)
def check_burst(request: Request, tenant: str, db: DbSession, principal: CurrentPrincipal,
                fields: FormFields) -> Response:
    """What saving the form would set, said before saving (the form asks on each change)."""

    def checked() -> Response:
        effect = burst.chosen(*_burst_choice(fields))
        return _burst_form(request, db, principal, tenant, fields, {}, 200, effect)

    return submitted(checked, lambda refusal: _burst_form(
        request, db, principal, tenant, fields, refusal.errors, refusal.status),
        schema_errors=_burst_errors)


@router.post("/admin/tenants/{tenant}/burst-policy", dependencies=PLATFORM_STATE_CHANGING)
def set_burst(request: Request, tenant: str, db: DbSession, principal: CurrentPrincipal,
              fields: FormFields) -> Response:
    def choose() -> Response:
        tier, own = _burst_choice(fields)
        burst.set_burst(db, principal, tenant, tier, own)
        if not is_htmx(request):
            return go_to(request, f"/t/{tenant}", focus="burst-summary")
        response = render(request, "quotas/_burst.html",
                          {**burst_context(db, principal, tenant), "saved": True})
        return with_toast(response, f"Burst of {tenant} set: its queues follow within seconds.")

    return submitted(choose, lambda refusal: _burst_form(
        request, db, principal, tenant, fields, refusal.errors, refusal.status),
        schema_errors=_burst_errors)


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
        payload = form_payload(fields, keys=("gpus", "slices", "gpu_share", "note",
                                             "overcommit"),
                               integers=("gpus", "slices"), booleans=("overcommit",))
        for unused in ("slices", "gpu_share"):
            if payload.get(unused) == "":
                payload.pop(unused)
        return service.approve(db, principal, request_id, ApproveIn.model_validate(payload))

    return _decided(request, db, principal, request_id, decide)


@router.post("/admin/quota-requests/{request_id}/reject", dependencies=PLATFORM_STATE_CHANGING)
def reject(request: Request, request_id: RowId, db: DbSession, principal: CurrentPrincipal,
           fields: FormFields) -> Response:
    def decide() -> Any:
        payload = form_payload(fields, keys=("note",))
        return service.reject(db, principal, request_id, RejectIn.model_validate(payload))

    return _decided(request, db, principal, request_id, decide)
