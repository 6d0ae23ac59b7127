"""REST: GPU classes with their capacity."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from app.auth.deps import CurrentPrincipal
from app.auth.idempotency import IdempotencyKeyHeader, run_idempotent
from app.authz import ensure_platform_writer
from app.gpu_classes import service as gpu_classes
from app.gpu_classes.schemas import GpuClassCreate, GpuClassOut, GpuClassUpdate
from app.http.deps import DbSession, RowId
from app.http.pagination import Page, Paging
from app.http.routing import UnitOfWorkRoute

router = APIRouter(prefix="/api/v1/gpu-classes", tags=["gpu classes"], route_class=UnitOfWorkRoute)


@router.get("", response_model=Page[GpuClassOut])
def list_classes(db: DbSession, principal: CurrentPrincipal,
                 paging: Paging) -> Page[GpuClassOut]:
    return gpu_classes.list_classes(db, principal, paging)


@router.post("", status_code=201, response_model=GpuClassOut)
def declare_class(request: Request, payload: GpuClassCreate, db: DbSession,
                  principal: CurrentPrincipal, key: IdempotencyKeyHeader = None) -> JSONResponse:
    return run_idempotent(db, principal, key, path=request.url.path, payload=payload,
                          allowed=lambda: ensure_platform_writer(principal),
                          create=lambda: gpu_classes.declare_class(db, principal, payload))


@router.patch("/{class_id}", response_model=GpuClassOut)
def update_class(class_id: RowId, payload: GpuClassUpdate, db: DbSession,
                 principal: CurrentPrincipal) -> GpuClassOut:
    return gpu_classes.update_class(db, principal, class_id, payload)
