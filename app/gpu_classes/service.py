"""GPU classes: declared by platform admins until the node inventory brings them, and the
capacity figures that quota approvals are checked against, each defined once in
``app.gpu_classes.capacity``. A declared class without nodes has a total of 0, so every
approval for it needs an explicit overcommit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.principal import Principal
from app.authz import ensure_platform_writer
from app.database.concurrency import insert_or_conflict, lock_row
from app.gpu_classes import capacity as capacity_figures
from app.gpu_classes import capacity_cache
from app.gpu_classes import repository as repository
from app.gpu_classes.models import GpuClass
from app.gpu_classes.schemas import (
    Capacity,
    GpuClassCreate,
    GpuClassOut,
    GpuClassUpdate,
    NamedClass,
)
from app.http.pagination import Page, PageParams
from app.kit.errors import Conflict, NotFound

# (session, class ids, region or None for the whole fleet) -> capacity per class
FiguresOf = Callable[[Session, Sequence[int], str | None], dict[int, Capacity]]


def capacity(db: Session, gpu_class_id: int, region: str | None = None) -> Capacity:
    return capacities(db, [gpu_class_id], region)[gpu_class_id]


def capacities(db: Session, gpu_class_ids: Sequence[int],
               region: str | None = None) -> dict[int, Capacity]:
    """The capacity of each class, over the fleet or in one region, summed afresh in SQL: a
    constant number of queries for any fleet."""
    return capacity_figures.class_capacities(db, gpu_class_ids, region)


def to_out(db: Session, principal: Principal, row: GpuClass) -> GpuClassOut:
    return to_outs(db, principal, [row])[0]


def recent_capacities(db: Session, gpu_class_ids: Sequence[int],
                      region: str | None = None) -> dict[int, Capacity]:
    """For pages that show capacity: figures summed at most a moment ago (see capacity_cache);
    never for a decision."""
    def compute(session: Session, keys: Sequence[capacity_cache.Key],
                ) -> dict[capacity_cache.Key, Capacity]:
        summed = capacities(session, [class_id for class_id, _ in keys], region)
        return {(class_id, region): figures for class_id, figures in summed.items()}

    found = capacity_cache.recent(db, [(class_id, region) for class_id in gpu_class_ids],
                                  compute)
    return {class_id: figures for (class_id, _), figures in found.items()}


def to_outs(db: Session, principal: Principal, rows: Sequence[GpuClass],
            figures_of: FiguresOf = capacities) -> list[GpuClassOut]:
    ids = [row.id for row in rows]
    figures = figures_of(db, ids, None) if principal.is_platform_admin else {}
    return [GpuClassOut(
        id=row.id, product=row.product, display_name=row.display_name,
        memory_mib=row.memory_mib, gpus_per_node=row.gpus_per_node,
        declared_by_admin=row.declared_by_admin, created_at=row.created_at,
        share_step=row.share_step, capacity=figures.get(row.id)) for row in rows]


def list_classes(db: Session, principal: Principal, params: PageParams) -> Page[GpuClassOut]:
    rows, cursor = repository.class_page(db, params)
    return Page(items=to_outs(db, principal, rows, recent_capacities), next_cursor=cursor)


def all_classes(db: Session) -> list[GpuClass]:
    """Every class, for pickers; the inventory holds a handful, not thousands."""
    return list(db.scalars(repository.classes_query().order_by(GpuClass.display_name)))


def named_class(db: Session, gpu_class_id: int) -> NamedClass | None:
    """The class's names, or None when there is no such class."""
    return repository.named_class(db, gpu_class_id)


def get_class(db: Session, gpu_class_id: int) -> GpuClass:
    row = db.get(GpuClass, gpu_class_id)
    if row is None:
        raise NotFound(f"no GPU class {gpu_class_id}")
    return row


def lock_class(db: Session, gpu_class_id: int) -> GpuClass:
    """Serialises quota decisions of one class, so capacity checks cannot interleave."""
    row = lock_row(db, GpuClass, gpu_class_id)
    if row is None:
        raise NotFound(f"no GPU class {gpu_class_id}")
    return row


def declare_class(db: Session, principal: Principal, payload: GpuClassCreate) -> GpuClassOut:
    ensure_platform_writer(principal)
    taken = Conflict(f"the GPU class {payload.product!r} exists already",
                     errors=[{"field": "product", "message": "this product is declared already"}])
    if repository.class_by_product(db, payload.product) is not None:
        raise taken
    row = GpuClass(product=payload.product, display_name=payload.display_name,
                   memory_mib=payload.memory_mib, gpus_per_node=payload.gpus_per_node,
                   declared_by_admin=True)
    insert_or_conflict(db, row, taken)
    audit.record(db, action="gpu_class.declare", actor_id=principal.user_id,
                 actor_label=principal.label, target_type="gpu_class", target_id=row.id,
                 target_label=f"GPU class {row.display_name}", after=payload.model_dump())
    return to_out(db, principal, row)


def update_class(
    db: Session, principal: Principal, gpu_class_id: int, payload: GpuClassUpdate
) -> GpuClassOut:
    """Renames a class, or sets its share step (None: not shared); audited with what changed."""
    ensure_platform_writer(principal)
    row = get_class(db, gpu_class_id)
    changes: dict[str, object] = {}
    if payload.display_name is not None:
        changes["display_name"] = payload.display_name
    if "share_step" in payload.model_fields_set:
        changes["share_step"] = payload.share_step
    before = {name: getattr(row, name) for name in changes}
    for name, value in changes.items():
        setattr(row, name, value)
    audit.record(db, action="gpu_class.update", actor_id=principal.user_id,
                 actor_label=principal.label, target_type="gpu_class", target_id=row.id,
                 target_label=f"GPU class {row.display_name}", before=before, after=changes)
    db.flush()
    if "share_step" in changes:
        capacity_cache.forget(db)
    return to_out(db, principal, row)
