"""REST: GPU classes with their capacity."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.auth.deps import CurrentPrincipal
from app.auth.idempotency import IdempotencyKeyHeader, run_idempotent
from app.authz import ensure_platform_writer
from app.authz.routes import PLATFORM_WRITE
from app.gpu_classes import service as gpu_classes
from app.gpu_classes.schemas import GpuClassCreate, GpuClassOut, GpuClassUpdate
from app.http.deps import DbSession, RowId
from app.http.pagination import Page, Paging
from app.http.problems import problems
from app.http.routing import UnitOfWorkRoute

router = APIRouter(prefix="/api/v1/gpu-classes", tags=["gpu classes"], route_class=UnitOfWorkRoute)


@router.get("", response_model=Page[GpuClassOut], summary="List GPU classes")
def list_classes(db: DbSession, principal: CurrentPrincipal,
                 paging: Paging) -> Page[GpuClassOut]:
    """Every GPU class (the GPU product as GPU Feature Discovery names it, e.g.
    `NVIDIA-H100-80GB-HBM3`), with memory and capacity: total, assigned to tenants, guaranteed
    by approved quota, and free."""
    return gpu_classes.list_classes(db, principal, paging)


@router.post("", dependencies=PLATFORM_WRITE, status_code=201, response_model=GpuClassOut,
             summary="Declare a GPU class", responses=problems(403, 409))
def declare_class(request: Request, payload: GpuClassCreate, db: DbSession,
                  principal: CurrentPrincipal, key: IdempotencyKeyHeader = None) -> Response:
    """Declares a GPU class before any node of it is seen, so quota can be asked for it (platform
    admins). 409 when the product exists. Audited."""
    return run_idempotent(db, principal, key, path=request.url.path, payload=payload,
                          allowed=lambda: ensure_platform_writer(principal),
                          create=lambda: gpu_classes.declare_class(db, principal, payload))


@router.patch("/{class_id}", dependencies=PLATFORM_WRITE, response_model=GpuClassOut,
              summary="Update a GPU class", responses=problems(403, 404))
def update_class(class_id: RowId, payload: GpuClassUpdate, db: DbSession,
                 principal: CurrentPrincipal) -> GpuClassOut:
    """Changes a class's display name, or its share step (platform admins): the hundredths of
    one GPU a share of the class is asked for in (25: 0.25, 0.5, 0.75, 1), or null to share
    none of it. KAI GPU sharing gives no memory isolation between the pods sharing a GPU.
    Audited."""
    return gpu_classes.update_class(db, principal, class_id, payload)
