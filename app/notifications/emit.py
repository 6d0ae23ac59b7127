"""Notifications from the audit trail: an audited action in ``EVENTS`` becomes a notification
and its deliveries, written in the transaction of the change (an outbox), so a change that
rolls back tells nobody and one that commits cannot lose its messages.

Fan-out happens here, once: the recipients as they are now, an email delivery each unless they
turned the kind off (a mandatory kind cannot be), a webhook delivery for each enabled endpoint
of the tenant (or of the platform, for the platform's kinds) that takes the kind. A destination
with ``QUEUE_LIMIT`` deliveries pending gets the new one as ``dropped`` (mandatory kinds
excepted): a receiver that never answers cannot grow the table without bound. Each destination
with a new pending delivery is enqueued for the worker's ``notifications`` kind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from app.audit import events
from app.audit.events import Recorded
from app.database.core import utcnow
from app.notifications import counted, kinds, payloads, recipients, repository
from app.notifications.kinds import KINDS
from app.notifications.models import new_uid
from app.notifications.recipients import Role
from app.workqueue import NOTIFICATIONS, enqueue_many

# PORTAL_NOTIFY_QUEUE_LIMIT once the settings carry it: pending deliveries a destination may
# hold before new ones are dropped.
QUEUE_LIMIT = 1000
# Burst GPUs reclaimed are told once per tenant per window, listing at most this many.
DIGEST_WINDOW = timedelta(minutes=15)
DIGEST_ITEMS_MAX = 50


@dataclass(frozen=True)
class Notice:
    """A notification to write: from an audited event here, or from the worker's scan (a
    time-based event, keyed by ``dedupe_key`` so a rescan never tells it twice)."""

    kind: str
    tenant_id: int | None
    subject_type: str
    subject_id: str
    payload: dict[str, Any]
    dedupe_key: str | None = None
    deliver_after: datetime | None = None


def notify(db: Session, notice: Notice, people: Sequence[int],
           endpoint_ids: Sequence[int] | None = None) -> int | None:
    """Writes the notification and its deliveries to ``people`` and to the endpoints that take
    its kind (``endpoint_ids``: only those); its id, or None when its dedupe key was told
    already."""
    mandatory = kinds.is_mandatory(notice.kind)
    values = {"uid": new_uid(), "kind": notice.kind, "tenant_id": notice.tenant_id,
              "subject_type": notice.subject_type, "subject_id": notice.subject_id[:64],
              "dedupe_key": notice.dedupe_key, "payload": notice.payload,
              "mandatory": mandatory, "created_at": utcnow(),
              "deliver_after": notice.deliver_after}
    if notice.dedupe_key is None:
        notification_id = repository.add_notification(db, values)
    else:
        found = repository.add_notification_once(db, values)
        if found is None:
            return None
        notification_id = found
    _fan_out(db, notification_id, notice, people, endpoint_ids, mandatory)
    return notification_id


# (channel, user id, endpoint id, destination)
Target = tuple[str, int | None, int | None, str]


def _fan_out(db: Session, notification_id: int, notice: Notice, people: Sequence[int],
             endpoint_ids: Sequence[int] | None, mandatory: bool) -> None:
    targets = _targets(db, notice, people, endpoint_ids, mandatory)
    full: set[str] = set() if mandatory else _full(db, [target[3] for target in targets])
    now = utcnow()
    rows = [{"notification_id": notification_id, "channel": channel, "user_id": user_id,
             "endpoint_id": endpoint_id, "destination": destination,
             "state": "dropped" if destination in full else "pending", "attempts": 0,
             "next_attempt_at": notice.deliver_after or now, "sending_since": None,
             "delivered_at": None, "last_error": "queue full" if destination in full else ""}
            for channel, user_id, endpoint_id, destination in targets]
    repository.add_deliveries(db, rows)
    counted.dropped(db, [target[0] for target in targets if target[3] in full])
    due = [target[3] for target in targets if target[3] not in full]
    if due:
        enqueue_many(db, NOTIFICATIONS, due, at=notice.deliver_after)


def _targets(db: Session, notice: Notice, people: Sequence[int],
             endpoint_ids: Sequence[int] | None, mandatory: bool) -> list[Target]:
    off = set() if mandatory else repository.emails_off(db, people, notice.kind)
    targets: list[Target] = [("email", user_id, None, f"email:{user_id}")
                             for user_id in dict.fromkeys(people) if user_id not in off]
    endpoints = (endpoint_ids if endpoint_ids is not None
                 else _endpoints_taking(db, notice.kind, notice.tenant_id))
    targets += [("webhook", None, endpoint_id, f"webhook:{endpoint_id}")
                for endpoint_id in endpoints]
    return targets


def _endpoints_taking(db: Session, kind: str, tenant_id: int | None) -> list[int]:
    audience = KINDS[kind].audience
    if audience == "person":
        return []
    owner = None if audience == "platform" else tenant_id
    if audience == "tenant" and tenant_id is None:
        return []
    return [row.id for row in repository.enabled_endpoints(db, owner)
            if row.kinds is None or kind in row.kinds]


def _full(db: Session, destinations: list[str]) -> set[str]:
    counts = repository.pending_counts(db, destinations)
    return {destination for destination, count in counts.items() if count >= QUEUE_LIMIT}


# ----- the audit trail's events that people hear of


def _always(_after: dict[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class EventSpec:
    kind: str
    recipients: tuple[Role, ...]
    payload: Callable[[Session, Recorded], dict[str, Any]]
    # Whether this occurrence is told, from the event's ``after``.
    when: Callable[[dict[str, Any]], bool] = _always


_TENANT_ADMINS: tuple[Role, ...] = ("tenant_admins",)
_PLATFORM_ADMINS: tuple[Role, ...] = ("platform_admins",)

EVENTS: dict[str, EventSpec] = {
    "quota_request.create": EventSpec(kinds.QUOTA_REQUESTED, _PLATFORM_ADMINS,
                                      payloads.quota_requested),
    "quota_request.approve": EventSpec(kinds.QUOTA_DECIDED, ("requester", "tenant_admins"),
                                       payloads.quota_decided),
    "quota_request.reject": EventSpec(kinds.QUOTA_DECIDED, ("requester", "tenant_admins"),
                                      payloads.quota_decided),
    # A change made by approving a request is told as the decision; by expiry, below.
    "tenant_quota.change": EventSpec(kinds.QUOTA_CHANGED, _TENANT_ADMINS,
                                     payloads.quota_changed,
                                     lambda after: after.get("quota_request_id") is None),
    "quota_request.expire": EventSpec(kinds.QUOTA_CHANGED, _TENANT_ADMINS,
                                      payloads.quota_expired),
    # Ready once, on becoming ready: not again on each resize of a ready cluster.
    "virtual_cluster.ready": EventSpec(kinds.CLUSTER_READY, ("creator", "tenant_admins"),
                                       payloads.cluster,
                                       lambda after: not after.get("was_ready")),
    "virtual_cluster.failed": EventSpec(kinds.CLUSTER_FAILED, ("creator", "tenant_admins"),
                                        payloads.cluster_failed),
    "virtual_cluster.asleep": EventSpec(kinds.CLUSTER_ASLEEP, _TENANT_ADMINS,
                                        payloads.cluster_power),
    "virtual_cluster.awake": EventSpec(kinds.CLUSTER_AWAKE, _TENANT_ADMINS,
                                       payloads.cluster_power),
    "virtual_cluster.deletion_warning": EventSpec(kinds.CLUSTER_DELETION_ANNOUNCED,
                                                  _TENANT_ADMINS,
                                                  payloads.cluster_deletion_announced),
    "virtual_cluster.deleted": EventSpec(kinds.CLUSTER_DELETED, _TENANT_ADMINS,
                                         payloads.cluster_deleted),
    "cluster.gpu_reclaimed": EventSpec(kinds.GPUS_RECLAIMED, _TENANT_ADMINS,
                                       payloads.gpus_reclaimed),
    "host_cluster.unreachable": EventSpec(kinds.HOST_UNREACHABLE, _PLATFORM_ADMINS,
                                          payloads.host_unreachable),
    "machine.failed": EventSpec(kinds.MACHINE_FAILED, _PLATFORM_ADMINS,
                                payloads.machine_failed),
    "cluster_template.validate": EventSpec(kinds.TEMPLATE_VALIDATION_FAILED, _PLATFORM_ADMINS,
                                           payloads.template_validation_failed,
                                           lambda after: after.get("passed") is False),
    # Marked failing by the worker (``reconcilers/notification_endpoints.py``): told once,
    # to whoever registered the endpoint, by email.
    "webhook_endpoint.failing": EventSpec(kinds.ENDPOINT_FAILING, ("registrant",),
                                          payloads.endpoint_failing),
}

# Told as one message per tenant per window.
_DIGESTS = frozenset({kinds.GPUS_RECLAIMED})


@events.recorded.connect
def _on_recorded(db: Session, event: Recorded) -> None:
    spec = EVENTS.get(event.action)
    if spec is None or not spec.when(event.after or {}):
        return
    if spec.kind in _DIGESTS:
        _digest(db, spec, event)
        return
    people = recipients.resolve(db, spec.recipients, event.tenant_id, event.target_id)
    notify(db, Notice(spec.kind, event.tenant_id, event.target_type, event.target_id,
                      spec.payload(db, event)), people)


def _digest(db: Session, spec: EventSpec, event: Recorded) -> None:
    """The window's notification, written by its first event and sent at the window's end;
    a later event of the window adds its item to it, under the row's lock."""
    now = utcnow()
    start = _window_start(now)
    key = f"{spec.kind}:{event.tenant_id}:{int(start.timestamp())}"
    payload = spec.payload(db, event)
    people = recipients.resolve(db, spec.recipients, event.tenant_id, event.target_id)
    notice = Notice(spec.kind, event.tenant_id, "tenant", str(event.tenant_id), payload,
                    dedupe_key=key, deliver_after=start + DIGEST_WINDOW)
    if notify(db, notice, people) is not None:
        return
    found = repository.notification_by_key_for_update(db, key)
    if found is None:
        return
    told = dict(found.payload)
    items = list(told.get("items") or [])
    if len(items) < DIGEST_ITEMS_MAX:
        items.extend(payload["items"])
    told.update(items=items, count=int(told.get("count") or 0) + 1)
    repository.replace_payload(db, found.id, told)


def _window_start(now: datetime) -> datetime:
    seconds = DIGEST_WINDOW.total_seconds()
    return datetime.fromtimestamp(now.timestamp() // seconds * seconds, UTC)
