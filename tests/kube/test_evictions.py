"""KAI's Evict events read as evictions: the pod, KAI's action, the evicted queue's line."""

from __future__ import annotations

from app.kube.evictions import eviction
from tests.usage.test_reclaims import evict_event


def test_an_evict_event_names_the_pod_its_virtual_name_and_the_action() -> None:
    found = eviction(evict_event("u1", "t-acme--train", "sweep-1-x-default-x-train", "preempt"))
    assert found is not None
    assert (found.uid, found.namespace, found.host_pod, found.virtual_pod, found.action) == (
        "u1", "t-acme--train", "sweep-1-x-default-x-train", "sweep-1", "preempt")
    assert found.queue_line.startswith("acme uses")


def test_other_events_and_unnamed_pods_are_not_evictions() -> None:
    event = evict_event("u2", "t-acme--train", "odd-name")
    assert eviction({**event, "involvedObject": {"kind": "Pod"}}) is None
    assert eviction({**event, "message": "something else"}) is None
    kept = eviction(event)
    assert kept is not None and kept.virtual_pod == "odd-name"
