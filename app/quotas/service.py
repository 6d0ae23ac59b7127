"""Quota requests, platform decisions and expiry.

Concurrency: a decision locks the request row, then its GPU class row (the same order
everywhere, so no deadlocks), checks capacity under that lock and claims the request with a
conditional ``UPDATE ... WHERE state = 'pending'``. Approvals of one class are therefore
serialised, and a request is decided exactly once, on PostgreSQL and on SQLite alike.
Errors are raised before the first write, so a refused decision leaves nothing behind.

Every change of a tenant's quota (an approval, an expiry) fires ``events.quota_changed`` in
its transaction; its listener enqueues the tenant's clusters, whose reconcile brings the
tenant's KAI queue and each cluster's quota on the host in line within seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from app.accounting import standing as accounting
from app.audit import readable
from app.audit import service as audit
from app.auth.models import User
from app.auth.principal import Principal
from app.authz import ensure_platform_admin, ensure_platform_writer
from app.database.core import utcnow
from app.gpu_classes import capacity as capacity_figures
from app.gpu_classes import capacity_cache
from app.gpu_classes import service as gpu_classes
from app.gpu_classes.models import GpuClass
from app.gpu_classes.schemas import Capacity, NamedClass
from app.http.pagination import Page, PageParams
from app.kit.config import Settings
from app.kit.errors import Conflict, NotFound, ValidationFailed
from app.quotas import events, figures, limits, regions, repository, units
from app.quotas.models import QuotaRequest, TenantQuota
from app.quotas.room import ALL_QUOTA_ROWS as ALL_QUOTA_ROWS
from app.quotas.room import ClassRoom as ClassRoom
from app.quotas.room import room_per_class as room_per_class
from app.quotas.schemas import (
    ApproveIn,
    ExpiredQuota,
    QueueItem,
    QuotaRequestCreate,
    QuotaRequestOut,
    RejectIn,
    TenantQuotaOut,
)
from app.tenants.access import tenant_for
from app.tenants.models import Tenant

EXPIRY_ACTOR = "quota-expiry"


@dataclass(frozen=True)
class Actor:
    id: int | None
    label: str

    @classmethod
    def of(cls, principal: Principal) -> Actor:
        return cls(principal.user_id, principal.label)


def _record(db: Session, actor: Actor, action: str, target: QuotaRequest | TenantQuota,
            before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
    target_type = "quota_request" if isinstance(target, QuotaRequest) else "tenant_quota"
    audit.record(db, action=action, actor_id=actor.id, actor_label=actor.label,
                 tenant_id=target.tenant_id, target_type=target_type, target_id=target.id,
                 target_label=_label(db, target), before=before, after=after)


def _label(db: Session, target: QuotaRequest | TenantQuota) -> str:
    """The request or quota as people say it: "H100 80GB HBM3 quota request #1 (demo)"."""
    tenant = db.get(Tenant, target.tenant_id)
    gpu_class = db.get(GpuClass, target.gpu_class_id)
    slug = tenant.slug if tenant else ""
    class_name = gpu_class.display_name if gpu_class else "GPU"
    if isinstance(target, QuotaRequest):
        return readable.quota_request_label(class_name, target.id, slug)
    return readable.quota_label(class_name, slug, target.region or "")


def _email(db: Session, user_id: int | None) -> str | None:
    user = db.get(User, user_id) if user_id is not None else None
    return user.email if user else None


def request_out(db: Session, request: QuotaRequest) -> QuotaRequestOut:
    """One request, from what the session holds already (no query after the usual lookups)."""
    tenant = db.get(Tenant, request.tenant_id)
    gpu_class = db.get(GpuClass, request.gpu_class_id)
    assert tenant is not None and gpu_class is not None
    return QuotaRequestOut(**_request_fields(
        request, tenant.slug, gpu_class.product, gpu_class.display_name,
        _email(db, request.requested_by_id), _email(db, request.decided_by_id)))


def _request_fields(request: QuotaRequest, tenant: str, gpu_class: str, gpu_class_name: str,
                    requested_by: str | None, decided_by: str | None) -> dict[str, Any]:
    return {
        "id": request.id, "tenant": tenant, "gpu_class_id": request.gpu_class_id,
        "gpu_class": gpu_class, "gpu_class_name": gpu_class_name, "region": request.region,
        "gpus": request.gpus,
        "cpu_millicores": request.cpu_millicores, "memory_mib": request.memory_mib,
        "reason": request.reason, "ends_at": request.ends_at, "state": request.state,
        "requested_by": requested_by, "created_at": request.created_at,
        "approved_gpus": request.approved_gpus, "overcommitted": request.overcommitted,
        "decided_by": decided_by, "decided_at": request.decided_at,
        "decision_note": request.decision_note,
        **units.request_unit_fields(request, gpu_class_name),
    }


def _listed_request_fields(row: Any) -> dict[str, Any]:
    """``_request_fields`` of a row of ``repository.request_rows_query``."""
    return _request_fields(row, row.tenant_slug, row.product, row.gpu_class_name,
                           row.requested_by, row.decided_by)


def _decision_state(request: QuotaRequest) -> dict[str, Any]:
    return {"state": request.state, "gpus": request.gpus, "approved_gpus": request.approved_gpus,
            "overcommitted": request.overcommitted, "note": request.decision_note,
            **units.unit_audit(request)}


# ----- what a tenant sees


def tenant_quota(
    db: Session, principal: Principal, slug: str, params: PageParams
) -> Page[TenantQuotaOut]:
    """A tenant's quota with what its clusters and dedicated nodes hold: one statement."""
    items, cursor = figures.tenant_quota_fields(db, principal, slug, params)
    return Page(items=[TenantQuotaOut(**fields) for fields in items], next_cursor=cursor)


def record_gpus_in_use(db: Session, host_id: int,
                       gpus: Mapping[repository.InUseKey, repository.BoundGpus],
                       observed_at: datetime) -> None:
    """What the worker read on one host: GPUs bound per (tenant, class) there and of those
    the burst, for every tenant and class with a cluster or dedicated node on it."""
    repository.replace_gpus_in_use(db, host_id, gpus, observed_at)


def tenant_requests(
    db: Session, principal: Principal, slug: str, params: PageParams, state: str | None = None
) -> Page[QuotaRequestOut]:
    tenant = tenant_for(db, principal, slug)
    rows, cursor = repository.request_page(db, tenant.id, state, params)
    return Page(items=[QuotaRequestOut(**_listed_request_fields(row)) for row in rows],
                next_cursor=cursor)


def classes_to_request(db: Session, principal: Principal, slug: str) -> list[GpuClass]:
    """The classes a tenant admin may ask quota for (all of them), once allowed to ask."""
    tenant_for(db, principal, slug, "manage")
    return gpu_classes.all_classes(db)


def offers(db: Session, classes: Sequence[GpuClass]) -> list[units.Offer]:
    """What the request form offers: per class, what its fleet can give (``units.offers_of``),
    from the figures the pages show."""
    return units.offers_of(classes, gpu_classes.recent_capacities(db, [c.id for c in classes]))


def regions_to_request(db: Session) -> list[str]:
    """The regions a request form offers (none to pick while there is only one)."""
    return [region for region in regions.fleet_regions(db) if region]


def check_request(
    db: Session, principal: Principal, slug: str, payload: QuotaRequestCreate
) -> tuple[Tenant, str]:
    """Everything ``create_request`` checks, without writing: for inline form validation.
    The tenant, and the concrete region the request is for."""
    tenant, _, region, _ = _checked_request(db, principal, slug, payload)
    return tenant, region


def _checked_request(
    db: Session, principal: Principal, slug: str, payload: QuotaRequestCreate
) -> tuple[Tenant, NamedClass, str, units.Ask]:
    tenant = tenant_for(db, principal, slug, "manage")
    ask = units.asked(payload)
    gpu_class = gpu_classes.named_class(db, payload.gpu_class_id)
    if gpu_class is None:
        raise ValidationFailed.on_field("gpu_class_id",
                                        f"there is no GPU class {payload.gpu_class_id}")
    region = regions.resolve(db, payload.region)
    row = db.get(GpuClass, gpu_class.id)
    units.refuse_what_the_fleet_lacks(gpu_class, gpu_classes.capacity(db, gpu_class.id, region),
                                      row.share_step if row else None, ask, region)
    return tenant, gpu_class, region, ask


def request_warnings(db: Session, principal: Principal, slug: str, gpu_class_id: int,
                     gpus: int, region: str) -> list[str]:
    """What the requester should know before sending, for the form as it is filled in: only
    the class, the count and the region need to be valid."""
    tenant_for(db, principal, slug, "manage")
    gpu_class = gpu_classes.named_class(db, gpu_class_id)
    if gpu_class is None:
        return []
    try:
        concrete = regions.resolve(db, region)
    except ValidationFailed:
        return []
    return _warnings_for_requester(db, principal, gpu_class, concrete, gpus)


def _warnings_for_requester(db: Session, principal: Principal, gpu_class: NamedClass,
                            region: str, gpus: int) -> list[str]:
    """Tenants are not shown the fleet's figures; platform admins are. Advice, not a decision:
    the fleet's size as summed at most a moment ago, as the pages show it."""
    total = gpu_classes.recent_capacities(db, [gpu_class.id], region)[gpu_class.id].total
    if principal.is_platform_admin:
        return _beyond_fleet(gpus, gpu_class.display_name, region, total)
    if gpus <= total:
        return []
    where = f" in region {region}" if region else ""
    return [f"{gpus} {gpu_class.display_name} GPUs is more than the whole fleet has{where}: "
            "the request can be sent, but expect a platform admin to approve fewer"]


def _beyond_fleet(gpus: int, display_name: str, region: str, total: int) -> list[str]:
    """The approver's warning when a request asks for more GPUs than the fleet has."""
    if gpus <= total:
        return []
    where = f" in region {region}" if region else ""
    return [f"asks for {gpus} {display_name} GPUs while the fleet has {total}{where}: "
            "approving all of it would need an overcommit"]


def create_request(db: Session, principal: Principal, settings: Settings, slug: str,
                   payload: QuotaRequestCreate) -> QuotaRequestOut:
    tenant, gpu_class, region, ask = _checked_request(db, principal, slug, payload)
    limits.ensure_room_for_a_request(db, settings, tenant)
    # A statement, not an ORM object: the row answers as it was stored, and nothing reads the
    # request back in this transaction.
    request = repository.add_request(db, {
        "tenant_id": tenant.id, "gpu_class_id": gpu_class.id, "region": region,
        "gpus": payload.gpus or 0, "unit": ask.unit.kind, "mig_profile": ask.unit.profile,
        "amount": ask.amount, "cpu_millicores": payload.cpu_millicores,
        "memory_mib": payload.memory_mib, "reason": payload.reason,
        "ends_at": payload.ends_at, "state": "pending", "requested_by_id": principal.user_id})
    audit.record(db, action="quota_request.create", actor_id=principal.user_id,
                 actor_label=principal.label, tenant_id=tenant.id, target_type="quota_request",
                 target_id=request.id,
                 target_label=readable.quota_request_label(gpu_class.display_name, request.id,
                                                           tenant.slug),
                 after={**payload.model_dump(mode="json", exclude=_unused(payload)),
                        "gpu_class": gpu_class.display_name, "region": region})
    # The caller's own email, rather than reading it again.
    return QuotaRequestOut(**_request_fields(request, tenant.slug, gpu_class.product,
                                             gpu_class.display_name, principal.user.email,
                                             None),
                           warnings=_warnings_for_requester(db, principal, gpu_class, region,
                                                            ask.amount)
                           if ask.unit.is_whole else [])


def _unused(payload: QuotaRequestCreate) -> set[str]:
    """The unit fields a request leaves out, kept out of its audit entry (a whole-GPU
    request's entry as it always was)."""
    return {name for name in ("slices", "mig_profile", "gpu_share")
            if getattr(payload, name) is None}


def cancel_request(
    db: Session, principal: Principal, slug: str, request_id: int
) -> QuotaRequestOut:
    tenant = tenant_for(db, principal, slug, "manage")
    request = _pending_request(db, request_id, tenant_id=tenant.id)
    before = _decision_state(request)
    _claim(db, request, "pending", state="cancelled", decided_by_id=principal.user_id,
           decided_at=utcnow())
    _record(db, Actor.of(principal), "quota_request.cancel", request, before,
            _decision_state(request))
    return request_out(db, request)


# ----- the platform admins' queue and decisions


def queue(
    db: Session, principal: Principal, params: PageParams, state: str | None = None
) -> Page[QueueItem]:
    """Oldest first: the request waiting longest is decided first."""
    ensure_platform_admin(principal)
    rows, cursor = repository.queue_page(db, state, params)
    return Page(items=_queue_items(db, rows, gpu_classes.recent_capacities), next_cursor=cursor)


def pending_requests(db: Session, principal: Principal) -> tuple[int, QueueItem | None]:
    """How many requests wait for a decision, and the one waiting longest."""
    ensure_platform_admin(principal)
    _count, _newest, pending, _decided = repository.queue_version(db)
    oldest = queue(db, principal, PageParams(limit=1), state="pending").items
    return pending, oldest[0] if oldest else None


def queue_version(db: Session, principal: Principal) -> str:
    """The approval queue's fingerprint, for its live stream."""
    ensure_platform_admin(principal)
    count, newest, pending, decided = repository.queue_version(db)
    return f"{count}-{newest}-{pending}-{decided.isoformat() if decided else ''}"


def queue_item(db: Session, request: QuotaRequest) -> QueueItem:
    row = db.execute(repository.queue_rows_query().where(QuotaRequest.id == request.id)).one()
    return _queue_items(db, [row])[0]


def _queue_items(db: Session, rows: Sequence[Any],
                 figures_of: gpu_classes.FiguresOf = gpu_classes.capacities) -> list[QueueItem]:
    """A page of requests, their tenants' figures and their classes' capacity: the capacity
    of all classes on the page in one go."""
    capacity: dict[tuple[int, str], Any] = {}
    for region in sorted({row.region for row in rows}):
        ids = sorted({row.gpu_class_id for row in rows if row.region == region})
        for class_id, found in figures_of(db, ids, region).items():
            capacity[class_id, region] = found
    return [QueueItem(**_listed_request_fields(row), tenant_quota_gpus=row.quota_gpus or 0,
                      tenant_allocated_gpus=row.allocated_gpus,
                      capacity=capacity[row.gpu_class_id, row.region],
                      warnings=_queue_warnings(row, row.gpu_class_name,
                                               capacity[row.gpu_class_id, row.region]))
            for row in rows]


def _queue_warnings(request: QuotaRequest, class_name: str, capacity: Capacity) -> list[str]:
    if request.state != "pending" or request.unit != "gpu":
        return []
    return _beyond_fleet(request.gpus, class_name, request.region, capacity.total)


def get_queue_item(db: Session, principal: Principal, request_id: int) -> QueueItem:
    ensure_platform_admin(principal)
    request = db.get(QuotaRequest, request_id)
    if request is None:
        raise NotFound(f"no quota request {request_id}")
    return queue_item(db, request)


def approve(db: Session, principal: Principal, request_id: int, payload: ApproveIn) -> QueueItem:
    ensure_platform_writer(principal)
    request = _pending_request(db, request_id)
    unit = units.unit_of(request)
    gpu_class = gpu_classes.lock_class(db, request.gpu_class_id)
    granted = units.approved_amount(request, payload, gpu_class.share_step,
                                    gpu_class.display_name)
    capacity = gpu_classes.capacity(db, gpu_class.id, request.region)
    free = capacity_figures.free_steps(capacity, unit)
    overcommitted = granted > free
    if overcommitted and not payload.overcommit:
        raise Conflict(
            units.overcommit_refusal(unit, granted, gpu_class.display_name, capacity, free,
                                     request.region),
            errors=[{"field": "overcommit", "message": "needs an explicit overcommit"}],
        )
    before = _decision_state(request)
    _claim(db, request, "pending", state="approved",
           approved_gpus=granted if unit.is_whole else 0, approved_amount=granted,
           overcommitted=overcommitted, decided_by_id=principal.user_id, decided_at=utcnow(),
           decision_note=payload.note)
    actor = Actor.of(principal)
    _record(db, actor, "quota_request.approve", request, before, _decision_state(request))
    _change_quota(db, actor, request, granted, request.cpu_millicores, request.memory_mib)
    return queue_item(db, request)


def reject(db: Session, principal: Principal, request_id: int, payload: RejectIn) -> QueueItem:
    ensure_platform_writer(principal)
    request = _pending_request(db, request_id)
    before = _decision_state(request)
    _claim(db, request, "pending", state="rejected", decided_by_id=principal.user_id,
           decided_at=utcnow(), decision_note=payload.note)
    _record(db, Actor.of(principal), "quota_request.reject", request, before,
            _decision_state(request))
    return queue_item(db, request)


def _pending_request(db: Session, request_id: int, tenant_id: int | None = None) -> QuotaRequest:
    request = repository.request_for_update(db, request_id)
    if request is None or (tenant_id is not None and request.tenant_id != tenant_id):
        raise NotFound(f"no quota request {request_id}")
    if request.state != "pending":
        raise Conflict(f"quota request {request_id} is {request.state} already")
    return request


def _claim(db: Session, request: QuotaRequest, from_state: str, **values: Any) -> None:
    if not repository.claim_request(db, request.id, from_state, **values):
        raise Conflict(f"quota request {request.id} was decided by someone else meanwhile")


def _change_quota(
    db: Session, actor: Actor, request: QuotaRequest, gpus: int, cpu: int, memory: int
) -> TenantQuota:
    """Adds (or with negative figures, takes away) quota; the caller holds the class lock."""
    row = repository.tenant_quota_for_update(db, request.tenant_id, request.gpu_class_id,
                                             request.region, request.unit, request.mig_profile)
    before = None
    if row is None:
        row = TenantQuota(tenant_id=request.tenant_id, gpu_class_id=request.gpu_class_id,
                          region=request.region, gpus=0, unit=request.unit,
                          mig_profile=request.mig_profile, amount=0, cpu_millicores=0,
                          memory_mib=0)
        db.add(row)
    else:
        before = _quota_figures(db, row)
    if request.unit == "gpu":
        row.gpus = max(0, row.gpus + gpus)
    else:
        row.amount = max(0, row.amount + gpus)
    row.cpu_millicores = max(0, row.cpu_millicores + cpu)
    row.memory_mib = max(0, row.memory_mib + memory)
    db.flush()
    capacity_cache.forget(db)
    # In this transaction: the hosts learn of it within seconds, or of nothing if it rolls back.
    events.quota_changed.fire(db, events.QuotaChanged(request.tenant_id, request.gpu_class_id,
                                                      request.region))
    _record(db, actor, "tenant_quota.change", row, before,
            {**_quota_figures(db, row), "quota_request_id": request.id})
    return row


def _quota_figures(db: Session, row: TenantQuota) -> dict[str, Any]:
    gpu_class = db.get(GpuClass, row.gpu_class_id)
    return {"gpu_class_id": row.gpu_class_id,
            "gpu_class": gpu_class.display_name if gpu_class else None,
            "region": row.region, "gpus": row.gpus,
            "cpu_millicores": row.cpu_millicores, "memory_mib": row.memory_mib,
            **units.unit_audit(row)}


# ----- expiry


def expire_quotas(db: Session, now: datetime) -> list[ExpiredQuota]:
    """Takes back the GPUs of approved requests whose end date has passed.

    Clusters left above the smaller quota are flagged ``over_quota``, never deleted: their
    owners decide what to shrink.
    """
    actor = Actor(None, EXPIRY_ACTOR)
    expired = []
    for request_id in repository.due_expiries(db, now):
        result = _expire_one(db, actor, request_id, now)
        if result is not None:
            expired.append(result)
    return expired


def _expire_one(db: Session, actor: Actor, request_id: int, now: datetime) -> ExpiredQuota | None:
    request = repository.request_for_update(db, request_id)
    if request is None or request.state != "approved" or request.ends_at is None:
        return None
    if request.ends_at > now:
        return None
    gpu_classes.lock_class(db, request.gpu_class_id)
    before = _decision_state(request)
    if not repository.claim_request(db, request.id, "approved", state="expired"):
        return None
    _record(db, actor, "quota_request.expire", request, before, _decision_state(request))
    gpus = (request.approved_gpus if request.unit == "gpu" else request.approved_amount) or 0
    quota = _change_quota(db, actor, request, -gpus, -request.cpu_millicores,
                          -request.memory_mib)
    shrunk = events.QuotaShrunk(request.tenant_id, request.gpu_class_id, request.region,
                                quota.gpus, actor.id, actor.label)
    events.quota_shrunk.fire(db, shrunk)
    over = accounting.standing(db, request.tenant_id, request.gpu_class_id,
                               request.region).over
    return ExpiredQuota(request_id=request.id, tenant_id=request.tenant_id,
                        gpu_class_id=request.gpu_class_id, region=request.region, gpus=gpus,
                        over_quota_cluster_ids=shrunk.over_quota_cluster_ids,
                        over_quota_gpus=over)
