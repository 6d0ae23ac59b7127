"""What happens to quotas that higher domains follow up on (app.kit.hooks)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from app.kit.hooks import Hook


@dataclass(frozen=True)
class QuotaChanged:
    """A tenant's quota of a GPU class in a region changed (approved, expired): what derives
    from it (the tenant's queues and its clusters' quotas on the hosts) must follow."""

    tenant_id: int
    gpu_class_id: int
    region: str


@dataclass(frozen=True)
class QuotaShrunk:
    """A tenant's quota of a GPU class in a region went down to ``quota_gpus`` without anyone
    asking."""

    tenant_id: int
    gpu_class_id: int
    region: str
    quota_gpus: int
    actor_id: int | None
    actor_label: str
    # Filled in by listeners: the clusters now above the quota.
    over_quota_cluster_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class BurstChanged:
    """A tenant's burst policy changed: its queues on every host must follow."""

    tenant_id: int


quota_shrunk: Hook[[Session, QuotaShrunk]] = Hook("quotas.quota_shrunk", required=True)
# Required: a quota change that reaches no host would wait for a resync unnoticed.
quota_changed: Hook[[Session, QuotaChanged]] = Hook("quotas.quota_changed", required=True)
burst_changed: Hook[[Session, BurstChanged]] = Hook("quotas.burst_changed", required=True)
