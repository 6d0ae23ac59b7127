"""Kubernetes-style conditions on a virtual cluster, as plain JSON dicts.

``set_condition`` returns a new list and keeps ``lastTransitionTime`` unless the status flips,
so a reconcile that finds nothing new produces an identical list (and writes nothing).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

Condition = dict[str, Any]

NAMESPACE_READY = "NamespaceReady"
QUOTA_APPLIED = "QuotaApplied"
NETWORK_POLICY_APPLIED = "NetworkPolicyApplied"
QUEUES_APPLIED = "QueuesApplied"
RELEASE_INSTALLED = "ReleaseInstalled"
READY = "Ready"
FAILED = "Failed"
# In display order: the provisioning steps, then the summary.
STEP_TYPES = (NAMESPACE_READY, QUOTA_APPLIED, NETWORK_POLICY_APPLIED, QUEUES_APPLIED,
              RELEASE_INSTALLED)
ORDER = (*STEP_TYPES, READY, FAILED)


def timestamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def find(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.get("type") == type_), None)


def is_true(conditions: list[Condition], type_: str) -> bool:
    found = find(conditions, type_)
    return found is not None and found.get("status") == "True"


def set_condition(
    conditions: list[Condition], type_: str, status: bool, reason: str, message: str,
    generation: int, now: datetime,
) -> list[Condition]:
    status_text = "True" if status else "False"
    previous = find(conditions, type_)
    changed_status = previous is None or previous.get("status") != status_text
    condition: Condition = {
        "type": type_, "status": status_text, "reason": reason, "message": message[:1000],
        "lastTransitionTime": timestamp(now) if changed_status
        else previous["lastTransitionTime"] if previous else timestamp(now),
        "observedGeneration": generation,
    }
    others = [c for c in conditions if c.get("type") != type_]
    return sorted([*others, condition], key=_position)


def _position(condition: Condition) -> int:
    type_ = condition.get("type", "")
    return ORDER.index(type_) if type_ in ORDER else len(ORDER)


def phase(conditions: list[Condition], deleting: bool) -> str:
    """One word for lists: Deleting, Failed, Ready, or Provisioning."""
    if deleting:
        return "Deleting"
    if is_true(conditions, FAILED):
        return "Failed"
    if is_true(conditions, READY):
        return "Ready"
    return "Provisioning"
