"""What each kind of notification says: its subject, its sentence and the fields it shows.

Only the fields named here are ever written into a message (email, Slack, CloudEvents ``data``):
a payload that carried anything else (a token, say) would not show it. ``{gpus:GPU}`` writes
a counted noun ("1 GPU", "4 GPUs"), ``{ends_at:day}`` a day in words ("9 Dec 2026") and
``{ends_at:moment}`` with its time ("9 Dec 2026 at 14:00 UTC"); a field the payload lacks is
written as a dash. A kind missing from the table gets a plain generic message, never an error.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.kit.format_characters import visible_format_characters
from app.kit.plurals import counted

MISSING = "—"
VALUE_CHARACTERS = 200
# A digest lists at most this many of its items (and says how many more there were).
ITEMS_SHOWN = 50
# Fields holding a time (ISO 8601 in a stored payload), written as "2026-12-07 14:00 UTC".
_TIME_SUFFIXES = ("_at", "_after", "_since", "_until")


@dataclass(frozen=True)
class KindText:
    subject: str
    sentence: str
    # (field, label) shown under the sentence, in this order.
    details: tuple[tuple[str, str], ...] = ()
    # A digest's payload lists its items under "items"; only these fields of each are shown.
    item_fields: tuple[tuple[str, str], ...] = ()
    fields: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        named = {name for _, name, _, _ in string.Formatter().parse(self.subject + self.sentence)
                 if name}
        object.__setattr__(self, "fields", frozenset(named | {f for f, _ in self.details}))


_TENANT = ("tenant", "Tenant")
_CLUSTER = ("cluster", "Cluster")
_REASON = ("reason", "Reason")
_QUOTA = (_TENANT, ("gpu_class", "GPU class"), ("gpus", "GPUs"), ("region", "Region"))

# The kinds' names are app/notifications/kinds.py's; the fields its payloads.py gives them.
KINDS: dict[str, KindText] = {
    "quota.requested": KindText(
        "Quota request from {tenant}: {gpus:GPU} ({gpu_class})",
        "Tenant {tenant} asked for {gpus:GPU} of class {gpu_class} in {region}. The request "
        "waits for a platform admin's decision.",
        (("request", "Request"), *_QUOTA, ("ends_at", "Until"))),
    "quota.decided": KindText(
        "Quota request {decision}: {gpus:GPU} for {tenant}",
        "Quota request {request} of tenant {tenant}, for {gpus:GPU}, was {decision}.",
        (("request", "Request"), _TENANT, ("decision", "Decision"), ("gpus", "GPUs asked"),
         ("approved_gpus", "GPUs approved"), ("note", "Note"))),
    "quota.changed": KindText(
        "Quota {change} for {tenant}",
        "Quota {quota} of tenant {tenant} was {change}.",
        (("quota", "Quota"), *_QUOTA, ("returned_gpus", "GPUs returned"))),
    "quota.expiring": KindText(
        "Quota of {gpus:GPU} ({gpu_class}) for {tenant} ends on {ends_at:day}",
        "The quota of {gpus:GPU} of class {gpu_class} that request #{request_id} gave tenant "
        "{tenant} ends on {ends_at:moment}: its GPUs then go back to the pool. Ask for more "
        "quota before then if you still need them.",
        (("request", "Request"), *_QUOTA, ("ends_at", "Ends"))),
    "cluster.ready": KindText(
        "Cluster {cluster} is Ready",
        "Cluster {cluster} of tenant {tenant} is Ready: take a kubeconfig from its page.",
        (_CLUSTER, _TENANT)),
    "cluster.failed": KindText(
        "Cluster {cluster} failed",
        "Cluster {cluster} of tenant {tenant} failed ({reason}). Its page says what went wrong.",
        (_CLUSTER, _TENANT, _REASON)),
    "cluster.stuck": KindText(
        "Cluster {cluster} of {tenant} stuck provisioning since {provisioning_since:moment}",
        "Cluster {cluster} of tenant {tenant} has been provisioning since "
        "{provisioning_since:moment}, {minutes:minute} now: longer than the {limit_minutes:minute} "
        "it should take. It waits on step {step}; its page shows why.",
        (_CLUSTER, _TENANT, ("provisioning_since", "Provisioning since"), ("step", "Waiting on"),
         ("generation", "Generation"))),
    "kubeconfig.expiring": KindText(
        "Your kubeconfig for {cluster} expires on {expires_at:moment}",
        "The {role} kubeconfig you took for cluster {cluster} of tenant {tenant} expires on "
        "{expires_at:moment}. Take a new one from the cluster's page before then to keep "
        "your access.",
        (_CLUSTER, _TENANT, ("role", "Role"), ("expires_at", "Expires"))),
    "cluster.asleep": KindText(
        "Cluster {cluster} is asleep",
        "Cluster {cluster} of tenant {tenant} is asleep: its GPUs are freed until it is woken.",
        (_CLUSTER, _TENANT, _REASON)),
    "cluster.awake": KindText(
        "Cluster {cluster} is awake",
        "Cluster {cluster} of tenant {tenant} is awake again.",
        (_CLUSTER, _TENANT, _REASON)),
    "cluster.deletion_announced": KindText(
        "Cluster {cluster} will be deleted {deletes_at}",
        "Cluster {cluster} of tenant {tenant}, asleep since {asleep_since}, will be deleted at "
        "{deletes_at} with everything in it. Wake it before then to keep it.",
        (_CLUSTER, _TENANT, ("asleep_since", "Asleep since"), ("deletes_at", "Deleted at"))),
    "cluster.deleted": KindText(
        "Cluster {cluster} was deleted",
        "Cluster {cluster} of tenant {tenant} was deleted.",
        (_CLUSTER, _TENANT)),
    "gpus.reclaimed": KindText(
        "Burst GPUs taken back from {tenant}",
        "The scheduler took back the GPUs lent beyond tenant {tenant}'s quota from {count:pod}, "
        "for other tenants' guaranteed share.",
        (_TENANT, ("count", "Pods")),
        item_fields=(_CLUSTER, ("pod", "Pod"), ("at", "When"))),
    "gpus.idle": KindText(
        "{gpus:GPU} of {tenant} idle on {date:day}",
        "On {date:day}, {gpus:GPU} held by tenant {tenant} stayed below {threshold_percent}% "
        "utilisation for {window_minutes:minute} (as of {observed_at:moment}). Put the idle "
        "clusters below to sleep, or give their GPUs back for other tenants.",
        (_TENANT, ("gpus", "Idle GPUs"), ("observed_at", "Read at")),
        item_fields=(_CLUSTER, ("gpus", "Idle GPUs"))),
    "host.unreachable": KindText(
        "Host {host} is unreachable",
        "The portal cannot reach host cluster {host}. Its page shows the last answer.",
        (("host", "Host"), _REASON)),
    "machine.failed": KindText(
        "Machine {machine} failed",
        "Bare-metal machine {machine} failed. Its page shows the step and the error.",
        (("machine", "Machine"), _REASON)),
    "template.validation_failed": KindText(
        "Template {template} failed validation",
        "Cluster template {template} version {version} failed its validation.",
        (("template", "Template"), ("version", "Version"), _REASON)),
    "endpoint.failing": KindText(
        "Webhook {endpoint} is failing",
        "Webhook endpoint {endpoint} has failed since {failing_since}: {last_error}. Its "
        "notifications are kept, up to its queue's bound, until it answers again.",
        (("endpoint", "Endpoint"), ("failing_since", "Failing since"),
         ("last_error", "Last error"))),
    "test": KindText(
        "Test notification",
        "A test notification for webhook endpoint {endpoint}, from the GPU Tenant Portal.",
        (("endpoint", "Endpoint"),)),
}


GENERIC = KindText("Notification from the GPU Tenant Portal",
                   "Something changed in the GPU Tenant Portal; its page has the details.")


@dataclass(frozen=True)
class Written:
    """A notification's words, every value already text."""

    subject: str
    sentence: str
    details: tuple[tuple[str, str], ...]
    # Each item of a digest as (label, text) pairs.
    items: tuple[tuple[tuple[str, str], ...], ...]
    more_items: int
    # The named fields with their values as stored (for a machine-readable body).
    data: dict[str, Any]


def kind_text(kind: str) -> KindText:
    return KINDS.get(kind, GENERIC)


def written(kind: str, payload: Mapping[str, Any]) -> Written:
    text = kind_text(kind)
    every_item = _items(payload) if text.item_fields else []
    items = every_item[:ITEMS_SHOWN]
    data = {name: payload[name] for name in sorted(text.fields) if name in payload}
    if text.item_fields:
        data["items"] = [_named(item, text.item_fields) for item in items]
    return Written(
        subject=" ".join(_FORMATTER.vformat(text.subject, (), payload).split()),
        sentence=_FORMATTER.vformat(text.sentence, (), payload),
        details=_shown_fields(payload, text.details),
        items=tuple(_shown_fields(item, text.item_fields) for item in items),
        more_items=len(every_item) - len(items),
        data=data,
    )


def shown(name: str, value: Any) -> str:
    """One payload value as text: times in UTC to the minute, lists joined, bounded."""
    text: str
    if value is None:
        text = MISSING
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, datetime):
        text = _time(value)
    elif isinstance(value, str) and (name == "at" or name.endswith(_TIME_SUFFIXES)):
        text = _time_text(value)
    elif isinstance(value, list | tuple):
        text = ", ".join(shown("", v) for v in value)
    else:
        text = str(value)
    text = visible_format_characters(" ".join(text.split()))
    return text if len(text) <= VALUE_CHARACTERS else text[:VALUE_CHARACTERS - 1] + "…"


def _shown_fields(values: Mapping[str, Any], fields: tuple[tuple[str, str], ...]
                  ) -> tuple[tuple[str, str], ...]:
    return tuple((label, shown(name, values[name])) for name, label in fields
                 if values.get(name) is not None)


def _named(values: Mapping[str, Any], fields: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    return {name: values[name] for name, _ in fields if name in values}


def _items(payload: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    items = payload.get("items")
    if not isinstance(items, list):
        return []
    return [item for item in items if isinstance(item, Mapping)]


def _time(value: datetime) -> str:
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _time_text(value: str) -> str:
    try:
        return _time(datetime.fromisoformat(value))
    except ValueError:
        return value


def _moment(value: Any) -> datetime | None:
    """A time or day as stored (a datetime, ISO 8601 text), in UTC; None if it is neither."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if not isinstance(value, datetime):
        return None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)


def _day(moment: datetime) -> str:
    return f"{moment.day} {_MONTHS[moment.month - 1]} {moment.year}"


def _day_and_time(moment: datetime) -> str:
    return f"{_day(moment)} at {moment:%H:%M} UTC"


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# ``{ends_at:day}`` "9 Dec 2026"; ``{ends_at:moment}`` "9 Dec 2026 at 14:00 UTC" (English
# month names whatever the machine's locale).
_MOMENTS: dict[str, Callable[[datetime], str]] = {"day": _day, "moment": _day_and_time}


class _Formatter(string.Formatter):
    """``str.format`` over the payload's named fields only: no attribute or index lookups
    (``{tenant.__class__}``), a missing field a dash, ``{n:noun}`` a counted noun."""

    def get_field(self, field_name: str, args: Sequence[Any],
                  kwargs: Mapping[str, Any]) -> tuple[Any, str]:
        if not field_name.isidentifier():
            raise ValueError(f"a message names plain fields only, not {field_name!r}")
        return (field_name, kwargs.get(field_name)), field_name

    def format_field(self, value: Any, format_spec: str) -> str:
        name, raw = value
        if format_spec in _MOMENTS:
            moment = _moment(raw)
            return _MOMENTS[format_spec](moment) if moment else shown(name, raw)
        if format_spec and isinstance(raw, int | float) and not isinstance(raw, bool):
            return counted(raw, format_spec)
        return shown(name, raw)


_FORMATTER = _Formatter()
