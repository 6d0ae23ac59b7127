"""What a tenant has left of its quota for new clusters: one row per GPU class for whole GPUs,
and one per class and unit for MIG slices of a profile and shares of one GPU (each a quota of
its own, ``app.accounting.standing``)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.http.pagination import PageParams
from app.kit.gpu_units import UNITS, WHOLE_GPUS, GrantUnit, steps, words
from app.quotas import figures
from app.quotas.schemas import TenantQuotaOut


@dataclass(frozen=True)
class ClassRoom:
    """What a tenant has left of one GPU class (in one unit) for new clusters, all regions
    together: for shared-pool clusters (its quota less its dedicated GPUs and its shared-pool
    clusters') and for dedicated-nodes clusters (its dedicated GPUs no cluster holds). In the
    unit's steps: GPUs, slices, hundredths of a GPU."""

    gpu_class_id: int
    product: str
    display_name: str
    approved: int
    left: int
    dedicated: int = 0
    dedicated_left: int = 0
    unit: GrantUnit = WHOLE_GPUS

    @property
    def value(self) -> str:
        """The create form's option: the class id, and the unit when it is not whole GPUs."""
        return offer_value(self.gpu_class_id, self.unit)

    @property
    def approved_words(self) -> str:
        return words(self.unit, self.approved, self.display_name)

    @property
    def left_words(self) -> str:
        return steps(self.unit, self.left)


def offer_value(gpu_class_id: int, unit: GrantUnit) -> str:
    """ "3" (whole GPUs of class 3), "3:mig:1g.10gb" or "3:share": what a form's class option
    carries."""
    if unit.is_whole:
        return str(gpu_class_id)
    return ":".join(part for part in (str(gpu_class_id), unit.kind, unit.profile) if part)


def parse_offer(value: str) -> tuple[str, GrantUnit] | None:
    """The class id (as typed) and unit of an ``offer_value``; None when it is not one."""
    class_id, _, rest = value.partition(":")
    if not rest:
        return class_id, WHOLE_GPUS
    kind, _, profile = rest.partition(":")
    try:
        return class_id, GrantUnit(kind, profile)  # type: ignore[arg-type]  # checked there
    except ValueError:
        return None


ALL_QUOTA_ROWS = PageParams(limit=1000)


def room_per_class(db: Session, principal: Principal, slug: str) -> list[ClassRoom]:
    """The classes (and units) the tenant holds approved quota of, and what is left of them
    for new clusters of each placement: what a create form offers."""
    items, _ = figures.tenant_quota_fields(db, principal, slug, ALL_QUOTA_ROWS)
    summed: dict[tuple[int, GrantUnit], list[int]] = {}
    names: dict[int, tuple[str, str]] = {}
    for row in (TenantQuotaOut(**fields) for fields in items):
        unit = GrantUnit(row.unit, row.mig_profile)  # type: ignore[arg-type]  # a UnitKind
        figures_of = summed.setdefault((row.gpu_class_id, unit), [0, 0, 0, 0])
        values = ((row.approved_gpus, row.shared_pool_left_gpus, row.dedicated_gpus,
                   row.dedicated_left_gpus) if unit.is_whole
                  else (row.amount, row.left_amount, 0, 0))
        for index, value in enumerate(values):
            figures_of[index] += value
        names[row.gpu_class_id] = (row.gpu_class, row.display_name)
    order = sorted(summed, key=lambda key: (names[key[0]][1], key[0], UNITS.index(key[1].kind),
                                            key[1].profile))
    rooms = []
    for class_id, unit in order:
        approved, left, dedicated, dedicated_left = summed[class_id, unit]
        if approved > 0:
            rooms.append(ClassRoom(class_id, *names[class_id], approved, left, dedicated,
                                   dedicated_left, unit))
    return rooms
