"""The list cache: one LIST per kind for any number of objects, a snapshot served until it is
too old, the reader's own writes seen at once, unlabelled objects not served."""

from __future__ import annotations

import pytest

from app.kube.cache import ListCache
from app.kube.memory import InMemoryKube
from app.kube.port import Manifest, ObjectRef

MANAGED = {"app.kubernetes.io/managed-by": "gpu-tenant-portal"}
KINDS = [("v1", "Namespace"), ("v1", "ResourceQuota")]


def namespace(name: str, labels: dict[str, str] | None = None) -> Manifest:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": MANAGED if labels is None else labels}}


def quota(namespace_name: str, gpus: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "tenant-quota", "namespace": namespace_name, "labels": MANAGED},
            "spec": {"hard": {"requests.nvidia.com/gpu": gpus}}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def kube() -> InMemoryKube:
    kube = InMemoryKube()
    for i in range(20):
        kube.apply(namespace(f"t-{i}"))
        kube.apply(quota(f"t-{i}", "4"))
    kube.reset_calls()
    return kube


def cache_of(kube: InMemoryKube, clock: Clock) -> ListCache:
    return ListCache(kube, KINDS, MANAGED, max_age_seconds=10, clock=clock)


def ref(kind: str, name: str, namespace_name: str | None = None) -> ObjectRef:
    return ObjectRef("v1", kind, name, namespace_name)


def test_any_number_of_reads_costs_one_list_per_kind(kube: InMemoryKube) -> None:
    cache = cache_of(kube, Clock())
    for i in range(20):
        found = cache.get(ref("ResourceQuota", "tenant-quota", f"t-{i}"))
        assert found is not None and found["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"
        assert cache.get(ref("Namespace", f"t-{i}")) is not None
    assert cache.get(ref("Namespace", "t-missing")) is None
    assert [(c.method, c.kind, c.namespace) for c in kube.calls] == [
        ("list", "Namespace", None), ("list", "ResourceQuota", None)]


def test_drift_on_the_server_is_seen_once_the_snapshot_is_too_old(kube: InMemoryKube) -> None:
    clock = Clock()
    cache = cache_of(kube, clock)
    target = ref("ResourceQuota", "tenant-quota", "t-3")
    cache.get(target)
    kube.apply(quota("t-3", "64"), force=True)  # someone else raises it
    kube.delete("v1", "Namespace", "t-4")
    clock.now += 9
    assert cache.get(target)["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"  # type: ignore[index]
    clock.now += 1
    assert cache.get(target)["spec"]["hard"]["requests.nvidia.com/gpu"] == "64"  # type: ignore[index]
    assert cache.get(ref("Namespace", "t-4")) is None
    assert cache.refreshes == 2


def test_the_readers_own_writes_are_seen_at_once(kube: InMemoryKube) -> None:
    cache = cache_of(kube, Clock())
    cache.get(ref("Namespace", "t-0"))
    cache.stored(kube.apply(quota("t-0", "8"), force=True))
    kube.delete("v1", "Namespace", "t-1")
    cache.forgot(ref("Namespace", "t-1"))
    assert cache.get(ref("ResourceQuota", "tenant-quota", "t-0"))["spec"]["hard"] == {  # type: ignore[index]
        "requests.nvidia.com/gpu": "8"}
    assert cache.get(ref("Namespace", "t-1")) is None
    assert cache.refreshes == 1


def test_objects_without_the_label_are_not_served(kube: InMemoryKube) -> None:
    kube.apply(namespace("t-0", labels={}), force=True)  # someone removed the portal's label
    cache = cache_of(kube, Clock())
    assert cache.get(ref("Namespace", "t-0")) is None  # the reader applies it, labels and all
    assert cache.get(ref("Namespace", "t-1")) is not None


def test_kinds_not_cached_are_refused(kube: InMemoryKube) -> None:
    cache = cache_of(kube, Clock())
    secret = ObjectRef("v1", "Secret", "vc-train", "t-0")
    assert not cache.covers(secret)
    with pytest.raises(ValueError, match="not cached"):
        cache.get(secret)
