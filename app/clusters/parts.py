"""Clusters of less than a GPU (issue 61): slices of one MIG profile, or a share of one GPU.

Such a cluster is in the shared pool only (no dedicated MIG nodes; private nodes are whole
machines), holds one unit for its life, and draws on the tenant's quota of that unit
(``app.accounting.standing``, one standing per unit): a create is placed on a host whose nodes
of the class have slices of the profile (or whole GPUs to share) in a region where that quota
has room; a resize stays within the unit and, growing, within the quota.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from sqlalchemy.orm import Session

from app.accounting import standing as accounting
from app.accounting.standing import Standing, shared_refusal
from app.clusters import checks, placement, repository
from app.clusters.models import VirtualCluster
from app.clusters.placement import Placed, PlacementRequest, Unplaceable
from app.clusters.schemas import ClusterCreate, ClusterResize
from app.gpu_classes import repository as gpu_class_figures
from app.gpu_classes.models import GpuClass
from app.kit.config import Settings
from app.kit.errors import ValidationFailed
from app.kit.gpu_units import SHARE, GrantUnit, ProfileRefused, parse_profile, profile_of_resource
from app.quotas import regions
from app.quotas.units import AMOUNT_FIELDS, WHAT_IS_ASKED, Ask, share_hundredths, step_refusal
from app.tenants.models import Tenant

SHARED_POOL = "shared-pool"


def part_of(payload: ClusterCreate) -> Ask | None:
    """The slices or the share a create asks for; None for whole GPUs (or none)."""
    if payload.slices is None and payload.gpu_share is None:
        if payload.mig_profile is not None:
            raise ValidationFailed.on_field("mig_profile", "only MIG slices have a profile")
        return None
    if payload.gpus or (payload.slices is not None and payload.gpu_share is not None):
        raise ValidationFailed.on_field(
            "slices" if payload.slices is not None else "gpu_share",
            "give only one of gpus, slices (with mig_profile) and gpu_share")
    if payload.gpu_share is not None:
        if payload.mig_profile is not None:
            raise ValidationFailed.on_field("mig_profile", "only MIG slices have a profile")
        return Ask(SHARE, share_hundredths(payload.gpu_share, "gpu_share"))
    assert payload.slices is not None
    if not payload.mig_profile:
        raise ValidationFailed.on_field("mig_profile",
                                        "name the MIG profile of the slices, such as 1g.10gb")
    try:
        return Ask(GrantUnit("mig", parse_profile(payload.mig_profile)), payload.slices)
    except ProfileRefused as refused:
        raise ValidationFailed.on_field("mig_profile", str(refused)) from None


def checked_class(gpu_class: GpuClass | None, payload: ClusterCreate, part: Ask) -> GpuClass:
    if gpu_class is None:
        raise ValidationFailed.on_field("gpu_class_id", f"choose the class of the "
                                                        f"{WHAT_IS_ASKED[part.unit.kind]}")
    if payload.placement != SHARED_POOL:
        raise ValidationFailed.on_field(
            "placement", f"a cluster of {WHAT_IS_ASKED[part.unit.kind]} is in the shared pool "
                         "only: dedicated and private nodes are whole GPUs")
    _refuse_off_step(gpu_class, part.unit, part.amount)
    return gpu_class


def place(db: Session, settings: Settings, tenant: Tenant, payload: ClusterCreate,
          gpu_class: GpuClass, hardened: str | None, part: Ask, *, lock: bool) -> Placed:
    """The host for a cluster of slices or of a share, under the lock of the tenant's quota
    rows of the class when ``lock``; refused in words (422 on the amount when the quota of the
    unit has no room anywhere, 409 naming each host's reasons otherwise)."""
    if lock:
        repository.standings(db, tenant.id, gpu_class.id, lock=True)
    rooms = accounting.standings(db, tenant.id, gpu_class.id, unit=part.unit)
    if payload.region:
        regions.resolve(db, payload.region)  # 422 on a region no host is in
    request = PlacementRequest(
        placement=SHARED_POOL, gpu_class_id=gpu_class.id, gpu_class_name=gpu_class.display_name,
        gpus=0, region=payload.region or None,
        quota_free={region: room.shared_left for region, room in rooms.items()},
        needs_webhook=settings.vcluster_edition == "oss", hardening=hardened,
        unit=part.unit, amount=part.amount)
    hosts = _with_slices(db, gpu_class.id, checks.host_facts(db, tenant.id, request))
    allowed = ({request.region} if request.region is not None
               else {h.region for h in hosts} | set(rooms))
    best = max(sorted(allowed), key=lambda r: rooms.get(r, Standing()).shared_left, default="")
    _refuse_beyond_quota(gpu_class, best, part, rooms.get(best, Standing()))
    result = placement.place(hosts, request)
    if isinstance(result, Unplaceable):
        raise checks.NoHostFits(result)
    _refuse_beyond_quota(gpu_class, result.region, part, rooms.get(result.region, Standing()))
    return result


def _with_slices(db: Session, class_id: int,
                 hosts: list[placement.HostFacts]) -> list[placement.HostFacts]:
    """The hosts, each with the slices per profile on its live nodes of the class."""
    slices: dict[int, dict[tuple[int, str], int]] = {}
    for (host_id, _), sums in gpu_class_figures.host_sums(db, [class_id]).items():
        for resource, found in sums.slices.items():
            profile = profile_of_resource(resource)
            if profile is not None:
                slices.setdefault(host_id, {})[class_id, profile] = found.total
    return [replace(host, slices=slices.get(host.id, {})) for host in hosts]


def _refuse_beyond_quota(gpu_class: GpuClass, region: str, part: Ask, room: Standing) -> None:
    refusal = shared_refusal(room, part.amount, gpu_class.display_name, region, SHARED_POOL,
                             part.unit)
    if refusal is not None:
        raise ValidationFailed.on_field(part.field, refusal)


def resized_amount(cluster: VirtualCluster, payload: ClusterResize) -> int | None:
    """The new amount a resize gives a cluster in its own unit; None when it leaves it. A size
    in another unit is refused: a cluster keeps its unit."""
    unit = GrantUnit(cluster.unit, cluster.mig_profile)  # type: ignore[arg-type]  # a UnitKind
    field = AMOUNT_FIELDS[unit.kind]
    for other in AMOUNT_FIELDS.values():
        if other != field and getattr(payload, other) not in (None, 0):
            raise ValidationFailed.on_field(
                other, f"this cluster holds {WHAT_IS_ASKED[unit.kind]}, one unit for its life: "
                       f"resize {field}, or create another cluster")
    value = getattr(payload, field)
    if value is None or unit.is_whole:
        return None
    if isinstance(value, Decimal):
        return share_hundredths(value, field)
    return int(value)


def check_growth(db: Session, tenant: Tenant, gpu_class: GpuClass, region: str,
                 cluster: VirtualCluster, amount: int) -> None:
    """A cluster of slices or a share grown to ``amount``: within the quota of its unit (under
    the quota rows' lock the caller holds)."""
    unit = GrantUnit(cluster.unit, cluster.mig_profile)  # type: ignore[arg-type]  # a UnitKind
    room = accounting.standing(db, tenant.id, gpu_class.id, region, excluding=cluster.id,
                               unit=unit)
    refusal = shared_refusal(room, amount, gpu_class.display_name, region, SHARED_POOL, unit)
    if refusal is not None:
        raise ValidationFailed.on_field(AMOUNT_FIELDS[unit.kind], refusal)
    _refuse_off_step(gpu_class, unit, amount)


def _refuse_off_step(gpu_class: GpuClass, unit: GrantUnit, amount: int) -> None:
    if unit.kind == "share" and gpu_class.share_step and amount % gpu_class.share_step:
        raise ValidationFailed.on_field(
            "gpu_share", step_refusal(gpu_class.display_name, gpu_class.share_step))


def unit_audit(cluster: VirtualCluster) -> dict[str, object]:
    """The unit of a cluster of slices or a share for its audit entries; nothing for whole
    GPUs."""
    if cluster.unit in (None, "gpu"):
        return {}
    return {"unit": cluster.unit, "mig_profile": cluster.mig_profile, "amount": cluster.amount}
