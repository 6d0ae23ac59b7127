"""HTML: the platform admins' GPU classes page with capacity per class."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.auth.deps import CurrentPrincipal
from app.auth.principal import Principal
from app.authz import ensure_platform_admin
from app.authz.routes import PLATFORM_STATE_CHANGING
from app.gpu_classes import service as gpu_classes
from app.gpu_classes.schemas import GpuClassCreate, GpuClassUpdate
from app.http.deps import DbSession, RowId
from app.http.pagination import PageParams
from app.http.routing import UnitOfWorkRoute
from app.web.forms import (
    FieldErrors,
    FormFields,
    Refusal,
    form_payload,
    go_to,
    in_row,
    is_htmx,
    submitted,
)
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)


def _page(request: Request, db: DbSession, principal: Principal,
          form: dict[str, Any] | None = None, errors: FieldErrors | None = None,
          status_code: int = 200) -> Response:
    ensure_platform_admin(principal)
    classes = gpu_classes.list_classes(db, principal, PageParams(limit=200)).items
    return render(request, "admin/gpu_classes.html",
                  {"classes": classes, "form": form or {}, "errors": errors or {}},
                  status_code=status_code)


@router.get("/admin/gpu-classes")
def admin_gpu_classes(request: Request, db: DbSession, principal: CurrentPrincipal) -> Response:
    return _page(request, db, principal)


@router.post("/admin/gpu-classes", dependencies=PLATFORM_STATE_CHANGING)
def declare_class(request: Request, db: DbSession, principal: CurrentPrincipal,
                  fields: FormFields) -> Response:
    payload = form_payload(fields, keys=("product", "display_name", "memory_mib",
                                         "gpus_per_node"),
                           integers=("memory_mib", "gpus_per_node"))

    def declare() -> Response:
        gpu_classes.declare_class(db, principal, GpuClassCreate.model_validate(payload))
        return go_to(request, "/admin/gpu-classes")

    return submitted(declare, lambda refusal: _page(request, db, principal, payload,
                                                    refusal.errors, refusal.status))


@router.post("/admin/gpu-classes/{class_id}", dependencies=PLATFORM_STATE_CHANGING)
def rename_class(request: Request, class_id: RowId, db: DbSession, principal: CurrentPrincipal,
                 fields: FormFields) -> Response:
    def rename() -> Response:
        given = form_payload(fields, keys=("display_name", "share_step"),
                             integers=("share_step",))
        if "share_step" in fields:  # the row's field, left blank: not shared
            given.setdefault("share_step", None)
        payload = GpuClassUpdate.model_validate(given)
        row = gpu_classes.update_class(db, principal, class_id, payload)
        if not is_htmx(request):
            return go_to(request, "/admin/gpu-classes")
        return render(request, "admin/_gpu_class_row.html", {"gpu_class": row, "error": ""})

    def row_refused(refusal: Refusal) -> Response:
        ensure_platform_admin(principal)
        current = gpu_classes.to_out(db, principal, gpu_classes.get_class(db, class_id))
        return render(request, "admin/_gpu_class_row.html",
                      {"gpu_class": current, "error": refusal.detail},
                      status_code=refusal.status)

    return submitted(rename, in_row(request, row_refused))
