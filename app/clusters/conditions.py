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
# False while the cluster's host cluster cannot be reached: every other condition is then the
# last one known (app/reconcilers/clusters/).
# True once the worker has scaled the control plane to zero and removed the synced pods.
ASLEEP = "Asleep"
HOST_REACHABLE = "HostReachable"
HOST_UNREACHABLE = "HostUnreachable"
# Shared-pool clusters on the open-source vCluster and hardened clusters: False (reason
# NoWebhookURL) while the host's API server has no way to the portal's admission webhook, so the
# queue guard and the hardening guard refuse the cluster's pods; absent until that happens once.
POD_ADMISSION = "PodAdmission"
NO_WEBHOOK_URL = "NoWebhookURL"
# What a hardened namespace's pods must carry, by hardening level (app/kube/manifests/labels.py).
HARDENING_NEEDS = {
    "seccomp": "a seccomp profile (RuntimeDefault or Localhost)",
    "user-namespaces": "hostUsers: false and a seccomp profile (RuntimeDefault or Localhost)",
}
# Private-nodes clusters (issue 57): the bootstrap group's bindings applied inside the virtual
# cluster (machines wait for it), and whole machines given for the GPUs asked.
NODE_BOOTSTRAP = "NodeBootstrap"
MACHINES_ASSIGNED = "MachinesAssigned"
# In display order: the provisioning steps, then the summary.
STEP_TYPES = (NAMESPACE_READY, QUOTA_APPLIED, NETWORK_POLICY_APPLIED, QUEUES_APPLIED,
              RELEASE_INSTALLED)
ORDER = (HOST_REACHABLE, POD_ADMISSION, *STEP_TYPES, READY, NODE_BOOTSTRAP, MACHINES_ASSIGNED,
         ASLEEP, FAILED)
# One condition per add-on installed into the virtual cluster, shown after Ready.
ADDON_PREFIX = "AddonReady/"
# KAI's team queues inside the virtual cluster, shown after the add-ons.
TEAM_QUEUES = "TeamQueuesApplied"


def addon_type(name: str) -> str:
    return f"{ADDON_PREFIX}{name}"


def addon_names(conditions: list[Condition]) -> list[str]:
    """The add-ons the conditions record: those installed, or being tried."""
    return [c["type"].removeprefix(ADDON_PREFIX) for c in conditions
            if str(c.get("type", "")).startswith(ADDON_PREFIX)]


def no_webhook_message(host: str, shared_pool: bool, hardening: str | None) -> str:
    """PodAdmission=False: why the host refuses the cluster's pods, and who fixes it."""
    refusals = []
    if shared_pool:
        refusals.append("refuses this cluster's pods rather than run them outside the KAI queue")
    if hardening is not None:
        needs = HARDENING_NEEDS.get(hardening, f"hardening {hardening!r}")
        refusals.append(f"refuses this cluster's pods that do not set {needs} themselves "
                        "rather than run them unhardened")
    return (f"host cluster {host} has no admission webhook URL, so its API server cannot reach "
            f"the portal's webhook and {', and '.join(refusals)}; a platform admin sets the "
            "host's webhook URL")


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


def remove_condition(conditions: list[Condition], type_: str) -> list[Condition]:
    return [c for c in conditions if c.get("type") != type_]


def _position(condition: Condition) -> tuple[int, str]:
    type_ = str(condition.get("type", ""))
    if type_.startswith(ADDON_PREFIX):
        return ORDER.index(READY), type_
    if type_ == TEAM_QUEUES:
        return ORDER.index(READY), "\uffff"
    return (ORDER.index(type_) if type_ in ORDER else len(ORDER)), ""


def statuses(conditions: list[Condition]) -> dict[str, str]:
    """Each condition's status by type (the first of a type, as ``find``): one pass, for a
    list that asks several questions of each cluster."""
    return {str(c.get("type")): str(c.get("status")) for c in reversed(conditions)}


def phase_of(status: dict[str, str], deleting: bool, power: str = "awake") -> str:
    """One word for lists, from ``statuses`` and the wanted power: Deleting, Unreachable,
    Failed, Sleeping, Waking, Ready, or Provisioning."""
    if deleting:
        return "Deleting"
    if status.get(HOST_REACHABLE) == "False":
        return "Unreachable"
    if status.get(FAILED) == "True":
        return "Failed"
    if power == "asleep":
        return "Sleeping"
    if status.get(ASLEEP) == "True":
        return "Waking"
    if status.get(READY) == "True":
        return "Ready"
    return "Provisioning"
