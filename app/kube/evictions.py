"""What KAI Scheduler took back on a host: the "Evict" events its scheduler records on the pod
group of each pod it evicts (reclaimed for a queue within its guarantee, preempted by a higher
priority, or moved to pack GPUs), read so that the owners' audit trail says so."""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.kube.port import KubePort, Manifest

# KAI's own words (pkg/scheduler/api/unschedule_info.go): "Pod <ns>/<name> was preempted by
# workload <ns>/<group>." for a reclaim, "... by higher priority workload ..." for a preemption.
_EVICTED_POD = re.compile(r"^Pod (?P<namespace>[^/\s]+)/(?P<name>\S+) was ")
ACTION_ANNOTATION = "evictor-action-type"
# What vCluster puts between a virtual pod's name, its namespace and the release on the host.
_SYNCED_SEPARATOR = "-x-"


@dataclass(frozen=True)
class Eviction:
    uid: str
    namespace: str
    host_pod: str
    # reclaim, preempt or consolidation, as KAI names its action
    action: str
    # The evicted queue's own line of KAI's message (its use, quota and fair share); the other
    # queue's line names another tenant, so it is left out.
    queue_line: str
    at: str

    @property
    def virtual_pod(self) -> str:
        """The pod's name in its virtual cluster (vCluster names it <name>-x-<ns>-x-<release>
        on the host); the host's name when it does not read so."""
        parts = self.host_pod.split(_SYNCED_SEPARATOR)
        return parts[0] if len(parts) == 3 else self.host_pod


def read_evictions(port: KubePort) -> list[Eviction]:
    events = port.list("v1", "Event", field_selector={"reason": "Evict"})
    return [e for e in map(eviction, events) if e is not None]


def eviction(event: Manifest) -> Eviction | None:
    meta = event.get("metadata") or {}
    found = _EVICTED_POD.match(event.get("message") or "")
    if (event.get("involvedObject") or {}).get("kind") != "PodGroup" or found is None:
        return None
    lines = (event.get("message") or "").splitlines()
    return Eviction(uid=str(meta.get("uid", "")), namespace=found["namespace"],
                    host_pod=found["name"],
                    action=(meta.get("annotations") or {}).get(ACTION_ANNOTATION, ""),
                    queue_line=lines[1].strip() if len(lines) > 1 else "",
                    at=str(event.get("lastTimestamp") or event.get("eventTime")
                           or meta.get("creationTimestamp") or ""))
