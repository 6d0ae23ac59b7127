"""How the audit log reads to a person: targets by name, changes field by field, actions by kind.

The API keeps the raw event (before and after as recorded); the page shows it through these.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# The families of actions the log can be filtered by (an action prefix ending in "."), in the
# order a person looks for them.
ACTION_KINDS: tuple[tuple[str, str], ...] = (
    ("quota_request.", "Quota requests"),
    ("tenant_quota.", "Quota changes"),
    ("virtual_cluster.", "Clusters"),
    ("kubeconfig.", "Kubeconfigs"),
    ("node.", "Nodes"),
    ("gpu_class.", "GPU classes"),
    ("tenant.", "Tenants"),
    ("membership.", "Members"),
    ("group_mapping.", "IdP group mappings"),
    ("user.", "Users"),
    ("api_token.", "API tokens"),
    ("host_cluster.", "Host clusters"),
    ("machine.", "Bare-metal machines"),
    ("cluster_template.", "Cluster templates"),
    ("webhook_endpoint.", "Webhook endpoints"),
    ("notification_preference.", "Notification preferences"),
    ("auth.", "Sign-ins"),
    ("authz.", "Access denied"),
)

# A target kind as a person says it, for events recorded without a label.
_KIND_WORDS = {
    "virtual_cluster": "cluster",
    "cluster": "cluster",
    "tenant_quota": "quota",
    "quota_request": "quota request",
    "kubeconfig_grant": "kubeconfig",
    "api_token": "API token",
    "gpu_class": "GPU class",
    "host_cluster": "host",
    "group_mapping": "group mapping",
    "cluster_template": "cluster template",
    "webhook_endpoint": "webhook endpoint",
}


def target_name(target_type: str, target_id: str, target_label: str) -> str:
    """The target as recorded by name, else its kind in words and its id."""
    if target_label:
        return target_label
    if not target_type:
        return target_id
    kind = _KIND_WORDS.get(target_type, target_type.replace("_", " "))
    if target_id.isdigit():
        return f"{kind} #{target_id}"
    return f"{kind} {target_id}".strip()


@dataclass(frozen=True)
class Change:
    """One field of an event: what it was and what it became ("" where it did not exist)."""

    field: str
    old: str
    new: str

    @property
    def kind(self) -> str:
        if not self.old:
            return "set"
        return "removed" if not self.new else "changed"


_ABSENT = object()


def changes(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[Change]:
    """The fields that differ between ``before`` and ``after``, in the order they were recorded;
    a creation lists what was set, a deletion what was removed."""
    before, after = before or {}, after or {}
    fields = list(before) + [name for name in after if name not in before]
    listed = []
    for name in fields:
        if _named_elsewhere(name, fields):
            continue
        old = _shown(before.get(name, _ABSENT))
        new = _shown(after.get(name, _ABSENT))
        if old != new:
            listed.append(Change(name.replace("_", " "), old, new))
    return listed


# What a row counting repeated denials adds to their fields (``app.audit.denials``).
TALLY_FIELDS = ("count", "window_start", "window_end")


def without_tally(after: dict[str, Any] | None) -> dict[str, Any] | None:
    if after is None or "count" not in after:
        return after
    return {name: value for name, value in after.items() if name not in TALLY_FIELDS}


def tally(after: dict[str, Any] | None) -> str:
    """How many requests a counting row stands for and when: "57 times on 2026-12-02 from
    14:02:10 to 14:03:10 UTC"; "" for any other event."""
    if not after or not isinstance(after.get("count"), int):
        return ""
    times = "once" if after["count"] == 1 else f"{after['count']} times"
    start, end = _moment(after.get("window_start")), _moment(after.get("window_end"))
    if start is None or end is None:
        return times
    if start.date() == end.date():
        return f"{times} on {start:%Y-%m-%d} from {start:%H:%M:%S} to {end:%H:%M:%S} UTC"
    return f"{times} from {start:%Y-%m-%d %H:%M:%S} to {end:%Y-%m-%d %H:%M:%S} UTC"


def _moment(value: Any) -> datetime | None:
    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return moment.astimezone(UTC) if moment and moment.tzinfo else moment


def _named_elsewhere(field: str, fields: list[str]) -> bool:
    """An id the event also records by name (``user_id`` beside ``user``): the name says it."""
    return field.endswith("_id") and field.removesuffix("_id") in fields


def _shown(value: Any) -> str:
    if value is _ABSENT:
        return ""
    if value is None or value == "":
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(", ", ": "), ensure_ascii=False)


# ----- labels a recording domain gives its targets, so that every page says them alike


def user_label(email: str, name: str | None = "") -> str:
    return f"{name} ({email})" if name and name != email else email


def tenant_label(slug: str, display_name: str) -> str:
    return f"tenant {display_name} ({slug})" if display_name != slug else f"tenant {slug}"


def member_label(email: str, tenant_slug: str) -> str:
    return f"{email} in {tenant_slug}"


def cluster_label(name: str) -> str:
    return f"cluster {name}"


def quota_request_label(gpu_class: str, request_id: int, tenant_slug: str) -> str:
    return f"{gpu_class} quota request #{request_id} ({tenant_slug})"


def quota_label(gpu_class: str, tenant_slug: str, region: str = "") -> str:
    where = f" in region {region}" if region else ""
    return f"{gpu_class} quota of {tenant_slug}{where}"
