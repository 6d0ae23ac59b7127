"""Burst: GPUs a tenant may use beyond its guarantee while others leave theirs idle.

A tenant's approved quota is its guarantee. Its tier says how much it may borrow above it
(none, a number of GPUs, or whatever the pool has idle), its share of idle GPUs against other
borrowers (KAI's over-quota weight) and how long its pods run before KAI may take borrowed
GPUs back (reclaim) or preempt them. A platform admin picks the tier and may set any of these
apart from it; the cluster reconciles carry the result to the tenant's KAI queues.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Final

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from app.audit import readable
from app.audit import service as audit
from app.auth.principal import Principal
from app.authz import ensure_platform_admin
from app.database.concurrency import lock_row
from app.database.prepared import Prepared
from app.kit.errors import ValidationFailed
from app.quotas import events
from app.quotas.models import BurstPolicy
from app.quotas.schemas import MAX_GPUS, MAX_RUNTIME_S
from app.tenants.access import tenant_for
from app.tenants.models import Tenant

UNLIMITED: Final = -1
FIELDS: Final = ("burst_gpus", "over_quota_weight", "reclaim_min_runtime_s",
                 "preempt_min_runtime_s")
# Bounds a person would not mean to pass: a pool bigger than any fleet, a week of runtime.
MOST: Final = {"burst_gpus": MAX_GPUS * 10, "over_quota_weight": 1000,
               "reclaim_min_runtime_s": MAX_RUNTIME_S, "preempt_min_runtime_s": MAX_RUNTIME_S}


@dataclass(frozen=True)
class Burst:
    """A tenant's burst, as KAI gets it. ``burst_gpus``: 0 none, -1 no ceiling but the pool."""

    tier: str
    burst_gpus: int
    over_quota_weight: int
    reclaim_min_runtime_s: int | None
    preempt_min_runtime_s: int | None
    # The fields a platform admin set apart from the tier.
    overrides: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"tier": self.tier, **{name: getattr(self, name) for name in FIELDS},
                "overrides": list(self.overrides)}


TIERS: Final = {
    # Exactly what was approved: nothing borrowed, nothing to take back.
    "guaranteed": Burst("guaranteed", 0, 1, None, None),
    # Idle GPUs of the tenant's classes, taken back as soon as their owners need them.
    "burst": Burst("burst", UNLIMITED, 1, None, None),
    # Three times the share of idle GPUs of a "burst" tenant; a pod keeps borrowed GPUs at least
    # ten minutes, so that a short job is not cut off for a queue that wants them back.
    "priority-burst": Burst("priority-burst", UNLIMITED, 3, 600, None),
}
DEFAULT_TIER: Final = "guaranteed"
# What each tier means, as the burst form explains it.
TIER_MEANINGS: Final = {
    "guaranteed": "exactly the approved quota: nothing borrowed, nothing taken back.",
    "burst": "borrows idle GPUs of its classes beyond the guarantee, with no ceiling but the "
             "pool; KAI Scheduler takes them back as soon as their owners need them.",
    "priority-burst": "as burst, with three times a burst tenant's share of idle GPUs; a pod "
                      "keeps borrowed GPUs at least 10 minutes before they may be taken back.",
}
# The values a platform admin may set apart from the tier, in words.
FIELD_NAMES: Final = {"burst_gpus": "burst ceiling", "over_quota_weight": "share of idle GPUs",
                      "reclaim_min_runtime_s": "time before reclaim",
                      "preempt_min_runtime_s": "time before preemption"}


def effective(row: Any) -> Burst:
    """The tier's values with the admin's own on top (``row``: a ``BurstPolicy`` or a row of
    ``_POLICY``; None for none)."""
    if row is None:
        return TIERS[DEFAULT_TIER]
    return chosen(row.tier, {name: getattr(row, name) for name in FIELDS})


def chosen(tier: str, own: dict[str, int | None]) -> Burst:
    """The tier's values with those set apart from it (None: the tier's)."""
    apart = {name: value for name, value in own.items() if value is not None}
    return replace(TIERS.get(tier, TIERS[DEFAULT_TIER]), tier=tier, overrides=tuple(apart),
                   **apart)


_POLICY = Prepared(select(BurstPolicy.tier, *(getattr(BurstPolicy, name) for name in FIELDS))
                   .where(BurstPolicy.tenant_id == bindparam("tenant_id")))


def tenant_burst(db: Session, tenant_id: int) -> Burst:
    found = _POLICY.rows(db, {"tenant_id": tenant_id})
    return effective(found[0] if found else None)


def burst_for(db: Session, principal: Principal, slug: str) -> Burst:
    """What the tenant's members see of their burst."""
    return tenant_burst(db, tenant_for(db, principal, slug).id)


def set_burst(db: Session, principal: Principal, slug: str, tier: str,
              own: dict[str, int | None]) -> Burst:
    """A platform admin's choice: the tier, and the values it sets apart from it (None: the
    tier's). Audited; the tenant's clusters are reconciled so that its queues follow."""
    ensure_platform_admin(principal)
    tenant = tenant_for(db, principal, slug)
    _check(tier, own)
    # Admins setting one tenant's policy at once: one after the other, the first inserting the
    # row (two inserts collided: a 500) and each audit's "before" what the last one left.
    lock_row(db, Tenant, tenant.id)
    row = db.get(BurstPolicy, tenant.id, populate_existing=True)
    before = effective(row).as_dict()
    if row is None:
        row = BurstPolicy(tenant_id=tenant.id)
        db.add(row)
    row.tier = tier
    for name in FIELDS:
        setattr(row, name, own.get(name))
    db.flush()
    after = effective(row)
    events.burst_changed.fire(db, events.BurstChanged(tenant.id))
    audit.record(db, action="tenant.burst_policy_change", actor_id=principal.user_id,
                 actor_label=principal.label, tenant_id=tenant.id, target_type="tenant",
                 target_id=tenant.id,
                 target_label=readable.tenant_label(tenant.slug, tenant.display_name),
                 before=before, after=after.as_dict())
    return after


def _check(tier: str, own: dict[str, int | None]) -> None:
    if tier not in TIERS:
        raise ValidationFailed.on_field(
            "tier", f"unknown tier {tier!r}; one of {', '.join(sorted(TIERS))}")
    for name in FIELDS:
        value, least = own.get(name), UNLIMITED if name == "burst_gpus" else 0
        if value is not None and not least <= value <= MOST[name]:
            what = "GPUs, or -1 for no ceiling" if name == "burst_gpus" else ""
            raise ValidationFailed.on_field(
                name, f"must be from {least} to {MOST[name]} {what}".rstrip())
