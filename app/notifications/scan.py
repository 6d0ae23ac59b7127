"""The notifications no audited change causes, found by looking at the time: an approved quota
ending within ``QUOTA_NOTICE``, a cluster provisioning for longer than it should, a kubeconfig
ending within ``KUBECONFIG_NOTICE``, a tenant's idle GPUs (read by the worker, handed in).

Each is written with a dedupe key (``quota.expiring:<request>``, ``cluster.stuck:<cluster>:
<generation>``, ``kubeconfig.expiring:<grant>``, ``gpus.idle:<tenant>:<day>``) on the outbox's
unique column: a second look, or a second worker looking at the same moment, writes nothing.
The queries leave out what was told already, so a look reads only what is new, and each writes
at most ``limit`` notifications (the caller looks again soon when one was full).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, String, cast, exists, literal, select
from sqlalchemy.orm import Session

from app.clusters import conditions as cond
from app.clusters.models import VirtualCluster
from app.gpu_classes.models import GpuClass
from app.kubeconfigs.models import KubeconfigGrant
from app.notifications import kinds, payloads, recipients
from app.notifications.emit import Notice, notify
from app.notifications.models import Notification
from app.quotas.models import QuotaRequest
from app.tenants.models import Tenant

QUOTA_NOTICE = timedelta(days=3)
KUBECONFIG_NOTICE = timedelta(hours=24)
# A kubeconfig is told of when a quarter of its life is left (at most a day): a day's (the
# default longest) 6 hours before its end. Shorter ones serve a script or a session, not a
# person who must renew them.
SHORTEST_TOLD = timedelta(hours=4)
# Conditions that say what a cluster is, not a step it waits on.
_SUMMARIES = frozenset({cond.READY, cond.FAILED, cond.ASLEEP})


def _key(kind: str, *parts: Any) -> ColumnElement[Any]:
    """The dedupe key ``kind:part:part`` as SQL, to compare with the outbox's."""
    key: ColumnElement[Any] = literal(kind, String)
    for part in parts:
        key = key + literal(":", String) + cast(part, String)
    return key


def _untold(kind: str, *parts: Any) -> ColumnElement[bool]:
    return ~exists().where(Notification.dedupe_key == _key(kind, *parts))


def expiring_quotas(db: Session, now: datetime, limit: int) -> int:
    """Approved requests ending within ``QUOTA_NOTICE``, to the tenant's admins; how many."""
    rows = db.execute(
        select(QuotaRequest.id, QuotaRequest.tenant_id, QuotaRequest.gpus,
               QuotaRequest.approved_gpus, QuotaRequest.region, QuotaRequest.ends_at,
               Tenant.slug, GpuClass.display_name)
        .join(Tenant, Tenant.id == QuotaRequest.tenant_id)
        .join(GpuClass, GpuClass.id == QuotaRequest.gpu_class_id)
        .where(QuotaRequest.state == "approved", QuotaRequest.ends_at > now,
               QuotaRequest.ends_at <= now + QUOTA_NOTICE,
               _untold(kinds.QUOTA_EXPIRING, QuotaRequest.id))
        .order_by(QuotaRequest.ends_at, QuotaRequest.id).limit(limit)).all()
    told = 0
    for row in rows:
        assert row.ends_at is not None  # the query's
        payload = payloads.quota_expiring(
            tenant=row.slug, request_id=row.id, gpu_class=row.display_name,
            gpus=row.approved_gpus if row.approved_gpus is not None else row.gpus,
            region=row.region, ends_at=row.ends_at)
        told += _tell(db, Notice(kinds.QUOTA_EXPIRING, row.tenant_id, "quota_request",
                                 str(row.id), payload,
                                 dedupe_key=f"{kinds.QUOTA_EXPIRING}:{row.id}"),
                      recipients.tenant_admins(db, row.tenant_id))
    return told


@dataclass(frozen=True)
class Stuck:
    since: datetime
    step: str


def stuck_clusters(db: Session, now: datetime, stuck_minutes: int, limit: int) -> int:
    """Clusters provisioning (not Ready, not Failed, awake, not being deleted) for longer than
    ``stuck_minutes`` since their last start, once per generation, to their creator and the
    tenant's admins; how many."""
    after = timedelta(minutes=stuck_minutes)
    rows = db.execute(
        select(VirtualCluster.id, VirtualCluster.tenant_id, VirtualCluster.name,
               VirtualCluster.generation, VirtualCluster.conditions, VirtualCluster.created_at,
               VirtualCluster.power_changed_at, Tenant.slug)
        .join(Tenant, Tenant.id == VirtualCluster.tenant_id)
        .where(VirtualCluster.deletion_requested_at.is_(None),
               VirtualCluster.power == "awake", VirtualCluster.created_at <= now - after,
               _untold(kinds.CLUSTER_STUCK, VirtualCluster.id, VirtualCluster.generation))
        .order_by(VirtualCluster.id)).all()
    told = 0
    for row in rows:
        found = provisioning(row.conditions or [], row.created_at, row.power_changed_at)
        if found is None or now - found.since < after:
            continue
        payload = payloads.cluster_stuck(
            tenant=row.slug, cluster_id=row.id, cluster_name=row.name,
            generation=row.generation, since=found.since,
            minutes=int((now - found.since).total_seconds() // 60),
            limit_minutes=stuck_minutes, step=found.step)
        people = recipients.resolve(db, ("creator", "tenant_admins"), row.tenant_id,
                                    str(row.id))
        told += _tell(db, Notice(kinds.CLUSTER_STUCK, row.tenant_id, "virtual_cluster",
                                 str(row.id), payload,
                                 dedupe_key=f"{kinds.CLUSTER_STUCK}:{row.id}:{row.generation}"),
                      people)
        if told >= limit:
            break
    return told


def provisioning(conditions: list[dict[str, Any]], created_at: datetime,
                 power_changed_at: datetime | None) -> Stuck | None:
    """Since when an awake cluster has been provisioning, and the step it waits on; None when
    it is Ready, Failed, waking or its host is unreachable (told otherwise, or not stuck)."""
    statuses = cond.statuses(conditions)
    if cond.phase_of(statuses, False) != "Provisioning":
        return None
    # Its last start: made, left Ready (a change of its spec), retried after a failure, woken.
    starts = [created_at, *([power_changed_at] if power_changed_at else [])]
    for type_ in (cond.READY, cond.FAILED):
        found = cond.find(conditions, type_)
        if found is not None and found.get("status") == "False":
            started = _transition(found)
            starts += [started] if started else []
    waiting = [str(c.get("type")) for c in conditions
               if c.get("status") != "True" and c.get("type") not in _SUMMARIES]
    missing = [t for t in cond.STEP_TYPES if t not in statuses]
    return Stuck(max(starts), (waiting or missing or [cond.READY])[0])


def _transition(condition: Mapping[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(str(condition.get("lastTransitionTime")))
    except ValueError:
        return None


def expiring_kubeconfigs(db: Session, now: datetime, limit: int) -> int:
    """Kubeconfigs not revoked with a quarter of their life left (at most
    ``KUBECONFIG_NOTICE``), to their holder only; how many. Those taken for less than
    ``SHORTEST_TOLD`` are not told."""
    rows = db.execute(
        select(KubeconfigGrant.id, KubeconfigGrant.role, KubeconfigGrant.created_at,
               KubeconfigGrant.expires_at, VirtualCluster.tenant_id, VirtualCluster.name,
               Tenant.slug)
        .join(VirtualCluster, VirtualCluster.id == KubeconfigGrant.cluster_id)
        .join(Tenant, Tenant.id == VirtualCluster.tenant_id)
        .where(KubeconfigGrant.revoked_at.is_(None), KubeconfigGrant.expires_at > now,
               KubeconfigGrant.expires_at <= now + KUBECONFIG_NOTICE,
               VirtualCluster.deletion_requested_at.is_(None),
               _untold(kinds.KUBECONFIG_EXPIRING, KubeconfigGrant.id))
        .order_by(KubeconfigGrant.expires_at, KubeconfigGrant.id)).all()
    told = 0
    for row in rows:
        life = row.expires_at - row.created_at
        if life < SHORTEST_TOLD or row.expires_at - now > min(KUBECONFIG_NOTICE, life / 4):
            continue
        payload = payloads.kubeconfig_expiring(
            tenant=row.slug, cluster_name=row.name, grant_id=row.id, role=row.role,
            expires_at=row.expires_at)
        holder = recipients.resolve(db, ("holder",), row.tenant_id, str(row.id))
        told += _tell(db, Notice(kinds.KUBECONFIG_EXPIRING, row.tenant_id, "kubeconfig_grant",
                                 str(row.id), payload,
                                 dedupe_key=f"{kinds.KUBECONFIG_EXPIRING}:{row.id}"), holder)
        if told >= limit:
            break
    return told


def idle_untold(db: Session, slugs: set[str], day: date) -> dict[str, int]:
    """Of these tenants (by slug), those not yet told of idle GPUs on ``day``: slug to id."""
    if not slugs:
        return {}
    return {row.slug: row.id for row in db.execute(
        select(Tenant.slug, Tenant.id).where(
            Tenant.slug.in_(slugs), _untold(kinds.GPUS_IDLE, Tenant.id, literal(day.isoformat(),
                                                                                String))))}


@dataclass(frozen=True)
class IdleReading:
    """Idle GPUs per tenant slug and cluster name (None: its dedicated nodes), as the worker
    read them from Prometheus, and the rule they were read by."""

    idle: Mapping[str, Mapping[str | None, int]]
    observed_at: datetime
    threshold_percent: float
    window_minutes: int


def idle_gpus(db: Session, reading: IdleReading, day: date, limit: int) -> int:
    """Each tenant with idle GPUs, once on ``day``, to its admins; how many."""
    untold = idle_untold(db, {slug for slug, by in reading.idle.items() if sum(by.values())},
                         day)
    told = 0
    for slug, tenant_id in sorted(untold.items())[:limit]:
        payload = payloads.gpus_idle(
            tenant=slug, day=day, idle={c: n for c, n in reading.idle[slug].items() if n},
            threshold_percent=reading.threshold_percent,
            window_minutes=reading.window_minutes, observed_at=reading.observed_at)
        told += _tell(db, Notice(kinds.GPUS_IDLE, tenant_id, "tenant", str(tenant_id), payload,
                                 dedupe_key=f"{kinds.GPUS_IDLE}:{tenant_id}:{day.isoformat()}"),
                      recipients.tenant_admins(db, tenant_id))
    return told


def _tell(db: Session, notice: Notice, people: list[int]) -> int:
    return 0 if notify(db, notice, people) is None else 1
