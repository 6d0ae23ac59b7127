"""Every object on a host has one writer: the whole worker (every kind) walks a tenant
through a journey on the simulated host of `portal dev`, and each write to the host is
recorded with the key of work that made it (a kind, and its key).

An object written under two keys (two kinds, or two keys of one kind: two clusters writing
their tenant's queue, as they once did) fails the test, and so does a kind writing what the
table below does not give it. One key is held by one worker at a time (its lease), so one
writer per object means two workers never write it at once."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import pytest

from app.kit.config import Settings
from app.kube.memory import InMemoryKube
from app.kube.port import ObjectRef
from app.process.devmode import DEMO_ADMIN, DEMO_TENANT_ADMIN
from app.reconcilers.kind import Context, Outcome
from tests.support.dev_portal import DevPortal, running_dev_portal

H100 = "NVIDIA-H100-80GB-HBM3"
# The kinds of object each kind of work writes on a host (apply or delete); the clusters'
# include what helm does in their reconcile (the chart's StatefulSet and Secret).
WRITES = {
    "clusters": {"Namespace", "ResourceQuota", "LimitRange", "NetworkPolicy", "Queue",
                 "StatefulSet", "Secret", "Pod"},
    "tenant-queues": {"Queue"},
    "platform-objects": {"Queue", "ValidatingAdmissionPolicy",
                         "ValidatingAdmissionPolicyBinding"},
    "nodes": {"Node"},
    "webhook": {"Namespace", "Secret", "MutatingWebhookConfiguration"},
}
# Who writes: the kind and key whose reconcile is running; outside any, the web process.
_WRITER: ContextVar[str] = ContextVar("writer", default="web")
Written = dict[tuple[str, str | None, str, str | None], set[str]]


def recording(portal: DevPortal) -> Written:
    """Tags each host write with its writer, from here on."""
    written: Written = defaultdict(set)
    for kind in portal.worker.kinds.values():
        kind.reconcile = _as_writer(  # type: ignore[method-assign,assignment]
            kind.name, kind.reconcile)
    kube = portal.simulation.kube
    apply, delete = kube.apply, kube.delete

    def applied(obj: dict[str, Any], *, force: bool = False) -> dict[str, Any]:
        ref = ObjectRef.of(obj)
        written[(ref.kind, ref.namespace, ref.name, ref.api_version)].add(_WRITER.get())
        return apply(obj, force=force)

    def deleted(api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        written[(kind, namespace, name, api_version)].add(_WRITER.get())
        return delete(api_version, kind, name, namespace)

    kube.apply = applied  # type: ignore[method-assign]
    kube.delete = deleted  # type: ignore[method-assign]
    return written


def _as_writer(name: str, reconcile: Callable[[str, Context], Outcome]
               ) -> Callable[[str, Context], Outcome]:
    def tagged(key: str, context: Context) -> Outcome:
        token = _WRITER.set(f"{name} {key}")
        try:
            return reconcile(key, context)
        finally:
            _WRITER.reset(token)
    return tagged


@pytest.fixture
def portal(tmp_path: Path, settings: Settings) -> Iterator[DevPortal]:
    with running_dev_portal(tmp_path, settings) as running:
        yield running


def journey(portal: DevPortal) -> None:
    """Quota, a dedicated node, a dedicated-nodes and a shared-pool cluster, burst, sleep and
    wake, a deletion, and the node given back."""
    client, alice, admin = (portal.client, portal.as_user(DEMO_TENANT_ADMIN),
                            portal.as_user(DEMO_ADMIN))

    def ok(answer: Any) -> None:
        assert answer.status_code < 300, answer.text

    portal.converge(1)
    classes = client.get("/api/v1/gpu-classes", headers=alice).json()["items"]
    h100 = next(c["id"] for c in classes if c["product"] == H100)
    asked = client.post("/api/v1/tenants/demo/quota-requests", headers=alice,
                        json={"gpu_class_id": h100, "gpus": 12, "reason": "the journey"})
    ok(asked)
    ok(client.post(f"/api/v1/quota-requests/{asked.json()['id']}/approve", headers=admin,
                   json={}))
    ok(client.put("/api/v1/nodes/h100-r1-n1/assignment", headers=admin,
                  json={"tenant": "demo"}))
    ok(client.post("/api/v1/tenants/demo/clusters", headers=alice, json={
        "name": "train", "placement": "dedicated-nodes", "gpu_class_id": h100, "gpus": 8}))
    ok(client.post("/api/v1/tenants/demo/clusters", headers=alice, json={
        "name": "serve", "gpu_class_id": h100, "gpus": 2}))
    portal.converge()
    ok(client.put("/api/v1/tenants/demo/burst-policy", headers=admin, json={"tier": "burst"}))
    ok(client.post("/api/v1/tenants/demo/clusters/serve/sleep", headers=alice))
    portal.converge()
    ok(client.post("/api/v1/tenants/demo/clusters/serve/wake", headers=alice))
    portal.converge()
    ok(client.delete("/api/v1/tenants/demo/clusters/serve", headers=alice))
    ok(client.delete("/api/v1/tenants/demo/clusters/train", headers=alice))
    portal.converge()
    ok(client.delete("/api/v1/nodes/h100-r1-n1/assignment", headers=admin))
    portal.converge()


def test_each_object_on_the_host_has_one_writer(portal: DevPortal) -> None:
    written = recording(portal)
    journey(portal)
    two = {f"{kind} {namespace or ''}/{name}": sorted(writers)
           for (kind, namespace, name, _), writers in written.items() if len(writers) > 1}
    assert two == {}, "objects with more than one writer"
    by_writer: dict[str, set[str]] = defaultdict(set)
    for (kind, _, _, _), writers in written.items():
        for writer in writers:
            by_writer[writer.split(" ")[0]].add(kind)
    assert {writer: kinds - WRITES.get(writer, set()) for writer, kinds in by_writer.items()
            if kinds - WRITES.get(writer, set())} == {}, "writes no kind is given"
    # The journey reaches every kind that writes (so that the table cannot rot unseen).
    assert set(by_writer) == set(WRITES)


def test_the_recorder_sees_a_second_writer(portal: DevPortal) -> None:
    written = recording(portal)
    portal.converge(1)
    host = portal.simulation.kube
    assert isinstance(host, InMemoryKube)
    node = host.get("v1", "Node", "h100-r1-n1")
    assert node is not None
    host.apply({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "h100-r1-n1", "labels": {"x": "y"}}}, force=True)
    writers = written[("Node", None, "h100-r1-n1", "v1")]
    assert len(writers) == 2 and "web" in writers
