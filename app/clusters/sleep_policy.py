"""Sleep policies: what a tenant admin sets, and what it asks of a cluster at a moment.

A policy may put an awake cluster to sleep after minutes without a GPU pod bound (``idle``;
with ``idle_measure`` ``utilisation`` also while every GPU bound stayed below the idle
threshold all those minutes, which the worker reads from Prometheus) or inside the windows
of a schedule in its time zone (``schedule``); a cluster the schedule put to sleep wakes when
its window ends (one put to sleep otherwise stays asleep until someone wakes it). A cluster
asleep for ``delete_after_sleep_days`` is deleted: first announced (the warning,
``deletion_warned_at``) a set time before, then deleted no sooner than that time after the
warning. ``never_sleep`` turns all of it off. Waking clears the warning. The deletion waits
while the warning is still on its way to someone (its notifications pending), at most one more
warning period: then it goes anyway, saying so.

The worker's ``sleep-policy`` kind (app/reconcilers/sleep_policy.py) reads the GPU use and
calls ``decide`` and ``carry_out`` for each live cluster with a policy.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from sqlalchemy.orm import Session

from app.audit import readable
from app.audit import service as audit
from app.auth.principal import Principal
from app.clusters import deletion, power, sleep_schedule
from app.clusters.models import VirtualCluster
from app.clusters.schemas import SleepPolicyIn
from app.kit.errors import Conflict
from app.workqueue import ALL, SLEEP_POLICY, enqueue

log = logging.getLogger(__name__)

ACTOR: Final = "sleep-policy"
POLICY_FIELDS: Final = ("never_sleep", "sleep_after_idle_minutes", "idle_measure",
                        "sleep_schedule", "sleep_timezone", "delete_after_sleep_days")
# Why a deletion went ahead while its warning was still being delivered (the audit's reason).
UNANNOUNCED: Final = ("the deletion warning was still undelivered one warning period after "
                      "the announced time")
Action = Literal["sleep-idle", "sleep-schedule", "wake-schedule", "warn", "delete"]


def set_policy(db: Session, cluster: VirtualCluster, payload: SleepPolicyIn, *,
               actor_id: int | None, actor_label: str) -> bool:
    """Sets the (locked) cluster's whole policy; False if nothing changed. Audited as
    virtual_cluster.sleep_policy; a change of the deletion rule withdraws a warning given."""
    if cluster.deletion_requested_at is not None:
        raise Conflict(f"cluster {cluster.name!r} is being deleted")
    wanted = payload.model_dump()
    before = policy_of(cluster)
    if before == wanted:
        return False
    deletion_rule = ("never_sleep", "delete_after_sleep_days")
    if any(before[name] != wanted[name] for name in deletion_rule):
        cluster.deletion_warned_at = cluster.deletion_due_at = None
    for name, value in wanted.items():
        setattr(cluster, name, value)
    db.flush()
    enqueue(db, SLEEP_POLICY, ALL)  # a schedule's window may have begun already
    audit.record(db, action="virtual_cluster.sleep_policy", actor_id=actor_id,
                 actor_label=actor_label, tenant_id=cluster.tenant_id,
                 target_type="virtual_cluster", target_id=cluster.id,
                 target_label=readable.cluster_label(cluster.name), before=before,
                 after=policy_of(cluster))
    return True


def change_policy(db: Session, principal: Principal, found: VirtualCluster,
                  payload: SleepPolicyIn) -> VirtualCluster:
    cluster = power.locked(db, found)
    set_policy(db, cluster, payload, actor_id=principal.user_id, actor_label=principal.label)
    return cluster


def sleeps_at_once(cluster: VirtualCluster, policy: SleepPolicyIn, now: datetime) -> bool:
    """Whether saving ``policy`` puts the awake cluster to sleep at once: its schedule's window
    holds ``now`` and nobody changed the cluster's power since that window began (as
    ``decide`` will find it)."""
    if policy.never_sleep or not policy.sleep_schedule or cluster.power == power.ASLEEP:
        return False
    began = sleep_schedule.window_began(policy.sleep_schedule, policy.sleep_timezone, now)
    changed = cluster.power_changed_at
    return began is not None and (changed is None or changed < began)


def policy_of(cluster: Any) -> dict[str, Any]:
    return {name: getattr(cluster, name) for name in POLICY_FIELDS}


def deletes_at(cluster: Any) -> datetime | None:
    """When the sleeping cluster will be deleted: the announced time once warned, else its
    days asleep from when it fell asleep; None if it will not be."""
    if (cluster.power != power.ASLEEP or cluster.never_sleep
            or cluster.delete_after_sleep_days is None or cluster.asleep_since is None):
        return None
    if cluster.deletion_due_at is not None:
        result: datetime = cluster.deletion_due_at
        return result
    return _due(cluster)


def _due(cluster: Any, speedup: float = 1.0) -> datetime:
    since: datetime = cluster.asleep_since
    return since + timedelta(days=cluster.delete_after_sleep_days) / speedup


# ----- what the policy asks now


@dataclass(frozen=True)
class Moment:
    """What ``decide`` knows besides the cluster: the time, whether a GPU pod was bound in
    the cluster's idle minutes, or, measured by utilisation, whether one of its GPUs was used
    (None: not known, its use was not sampled then or Prometheus could not say), and how long
    before a deletion it is announced."""

    now: datetime
    busy: bool | None
    warning: timedelta
    # Demonstrations and tests run the policies' durations faster (PORTAL_SLEEP_POLICY_SPEEDUP).
    speedup: float = 1.0
    # What the idle reading rests on when it is more than "no GPU pod bound" (GPU utilisation:
    # its measure and peak), recorded with an idle sleep.
    evidence: Mapping[str, object] = field(default_factory=dict)
    # Whether the cluster's deletion warning is still being delivered to someone (a
    # notification pending): the deletion waits for it, at most one more warning period.
    announcing: bool = False


def decide(cluster: VirtualCluster, moment: Moment) -> Action | None:
    if cluster.deletion_requested_at is not None:
        return None
    if cluster.power == power.ASLEEP:
        return _asleep(cluster, moment)
    if cluster.never_sleep:
        return None
    if _schedule_sleeps(cluster, moment.now):
        return "sleep-schedule"
    if _idle(cluster, moment):
        return "sleep-idle"
    return None


def _asleep(cluster: VirtualCluster, moment: Moment) -> Action | None:
    if cluster.power_reason == "schedule" and (
            cluster.never_sleep or not _in_window(cluster, moment.now)):
        return "wake-schedule"
    if deletes_at(cluster) is None:
        return None
    if cluster.deletion_warned_at is None:
        return "warn" if moment.now >= _due(cluster, moment.speedup) - moment.warning else None
    due = cluster.deletion_due_at or _due(cluster, moment.speedup)
    warned_long_enough = moment.now >= cluster.deletion_warned_at + moment.warning
    if moment.now < due or not warned_long_enough:
        return None
    if moment.announcing and not _unannounced_overdue(cluster, moment):
        return None
    return "delete"


def _unannounced_overdue(cluster: VirtualCluster, moment: Moment) -> bool:
    """Whether a deletion whose warning is still undelivered has waited its one more warning
    period past its time."""
    due = max(cluster.deletion_due_at or _due(cluster, moment.speedup),
              (cluster.deletion_warned_at or moment.now) + moment.warning)
    return moment.now >= due + moment.warning


def _in_window(cluster: VirtualCluster, now: datetime) -> bool:
    return _window_began(cluster, now) is not None


def _window_began(cluster: VirtualCluster, now: datetime) -> datetime | None:
    if not cluster.sleep_schedule:
        return None
    try:
        return sleep_schedule.window_began(cluster.sleep_schedule, cluster.sleep_timezone, now)
    except ValueError as error:  # stored before a stricter parser: no window
        log.warning("cluster %d: its sleep schedule is not understood: %s", cluster.id, error)
        return None


def _schedule_sleeps(cluster: VirtualCluster, now: datetime) -> bool:
    """Inside a window, unless the cluster was woken (or its power changed) after the window
    began: someone who wakes it in its window keeps it awake until the next one."""
    began = _window_began(cluster, now)
    if began is None:
        return False
    return cluster.power_changed_at is None or cluster.power_changed_at < began


def _idle(cluster: VirtualCluster, moment: Moment) -> bool:
    """Awake for at least its idle minutes, sampled in them and no GPU pod bound."""
    minutes = cluster.sleep_after_idle_minutes
    if minutes is None or moment.busy is not False:
        return False
    awake_since = max(cluster.created_at, cluster.power_changed_at or cluster.created_at)
    return moment.now - awake_since >= timedelta(minutes=minutes) / moment.speedup


# ----- carrying it out


def carry_out(db: Session, cluster: VirtualCluster, action: Action, moment: Moment) -> None:
    """Does what ``decide`` asked of the locked cluster, audited as the sleep policy."""
    if action.startswith("sleep") and not power.may_sleep(cluster):
        return  # a private-nodes cluster's policy never puts it to sleep (power.py)
    if action == "sleep-idle":
        power.request(db, cluster, power.ASLEEP, "idle", actor_id=None, actor_label=ACTOR,
                      detail=moment.evidence)
    elif action == "sleep-schedule":
        power.request(db, cluster, power.ASLEEP, "schedule", actor_id=None, actor_label=ACTOR)
    elif action == "wake-schedule":
        power.request(db, cluster, power.AWAKE, "schedule", actor_id=None, actor_label=ACTOR)
    elif action == "warn":
        _warn(db, cluster, moment)
    else:
        reason = None
        if moment.announcing:
            reason = UNANNOUNCED
            log.warning("cluster %d: deleted by its sleep policy although its deletion warning "
                        "is still undelivered, one warning period past its time", cluster.id)
        deletion.request_deletion(db, cluster, deletion.spec_of(cluster), actor_id=None,
                                  actor_label=ACTOR, reason=reason)


def _warn(db: Session, cluster: VirtualCluster, moment: Moment) -> None:
    cluster.deletion_warned_at = moment.now
    cluster.deletion_due_at = max(_due(cluster, moment.speedup), moment.now + moment.warning)
    db.flush()
    audit.record(db, action="virtual_cluster.deletion_warning", actor_id=None,
                 actor_label=ACTOR, tenant_id=cluster.tenant_id,
                 target_type="virtual_cluster", target_id=cluster.id,
                 target_label=readable.cluster_label(cluster.name), before=None,
                 after={"deletes_at": cluster.deletion_due_at.isoformat(),
                        "asleep_since": _iso(cluster.asleep_since),
                        "delete_after_sleep_days": cluster.delete_after_sleep_days})


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None
