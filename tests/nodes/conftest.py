"""Fixtures for nodes: a connector handing out one host port, the reference nodes in the
in-memory fake for service tests, and the reference fleet registered on the real host API
server (``fleet``, once for the package) with the portal's node reconciler on it (``portal``)."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.memory import InMemoryKube
from app.kube.port import KubePort, Manifest, register_kind
from app.reconcilers.nodes import NodeReconciler
from tests.support.drive import run_due
from tests.support.kube import RecordingConnector, RecordingPort
from tests.support.kube_server import ApiServer
from tests.support.kubectl import Kubectl, KubectlError
from tests.support.paths import HOST_NODES
from tests.support.waiting import HANG_SECONDS, wait_for

RACK_LABEL = "network.topology.example.com/rack"
NOT_READY = "node.kubernetes.io/not-ready"
LEASE_API = "coordination.k8s.io/v1"
LEASE_NAMESPACE = "kube-node-lease"
HEARTBEAT_SECONDS = 5.0
NODE_MONITOR_SECONDS = 5.0  # the controller-manager's --node-monitor-period default
TTL_ANNOTATION = "node.alpha.kubernetes.io/ttl"  # the TTL controller's, on every node it saw
register_kind(LEASE_API, "Lease", "leases", namespaced=True)


class HostOnly:
    """A ``KubeConnector`` whose host cluster is the given port (or none)."""

    def __init__(self, host: KubePort | None) -> None:
        self._host = host

    def host(self) -> KubePort | None:
        return self._host

    def virtual(self, kubeconfig_yaml: str) -> KubePort:
        raise AssertionError("node tests reach no virtual cluster")

    def ready(self, kubeconfig_yaml: str) -> bool:
        return False


def reference_nodes() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(HOST_NODES.read_text())["items"]
    for item in items:
        item.setdefault("apiVersion", "v1")
        item.setdefault("kind", "Node")
    return items


@pytest.fixture
def host_kube() -> InMemoryKube:
    """The in-memory fake holding the reference NodeList."""
    kube = InMemoryKube()
    for node in reference_nodes():
        kube.seed(node)
    return kube


RESYNC_SECONDS = 300.0


@dataclass
class Later:
    """The runtime's clock in a test: the real time (what ``enqueue`` stamps), moved on by
    what the test let pass."""

    offset: float = 0.0

    def __call__(self) -> datetime:
        return utcnow() + timedelta(seconds=self.offset)

    def later(self, seconds: float) -> None:
        self.offset += seconds


def reconciler(database: Database, host: KubePort | None,
               resync_seconds: float = RESYNC_SECONDS,
               clock: Later | None = None) -> NodeReconciler:
    settings = Settings(env="test", database_url="sqlite://", rack_label=RACK_LABEL,
                        worker_resync_seconds=resync_seconds)
    return NodeReconciler(settings, database, HostOnly(host), now=clock or Later())


@dataclass
class Synced:
    database: Database
    kube: InMemoryKube
    reconciler: NodeReconciler
    clock: Later = field(default_factory=Later)

    def resync(self) -> int:
        """The host's next pass at its resync period; the items handled."""
        self.clock.later(RESYNC_SECONDS)
        return run_due(self.reconciler, "test")


@pytest.fixture
def synced(database: Database, host_kube: InMemoryKube) -> Synced:
    """The reference nodes synced into the inventory through the fake."""
    clock = Later()
    loop = reconciler(database, host_kube, clock=clock)
    run_due(loop, "test")
    host_kube.reset_calls()
    return Synced(database, host_kube, loop, clock)


# ----- the reference fleet on the real host API server, registered once for tests/nodes


class Heartbeats:
    """Renews every node's Lease as its kubelet would, so that the node lifecycle controller
    keeps the status the nodes registered with (without, it marks them Unknown after ~50 s)."""

    def __init__(self, kubelet: Kubectl, names: list[str]) -> None:
        self.kubelet = kubelet
        self.names = names
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kubelet-heartbeats",
                                        daemon=True)

    def start(self) -> None:
        self.beat()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def beat(self) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        for name in self.names:
            self.kubelet.apply({
                "apiVersion": LEASE_API, "kind": "Lease",
                "metadata": {"name": name, "namespace": LEASE_NAMESPACE},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now},
            })

    def _loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                self.beat()
            except (httpx.HTTPError, KubectlError):
                # Late under load: the next beat renews. A thread ended by one timeout would let
                # every node go Unknown, its not-ready taints turned to unreachable ones.
                continue


@dataclass
class Fleet:
    api: ApiServer
    admin: KubernetesAdapter
    kubectl: Kubectl  # an operator editing nodes by hand
    kubeconfig: Path
    names: list[str]
    # What the lifecycle controller put on the NotReady node: not-ready NoSchedule and NoExecute
    controller_taints: list[Manifest]

    def node(self, name: str) -> Manifest:
        found = self.admin.get("v1", "Node", name)
        assert found is not None, f"node {name} is not on the server"
        return found


def register(kubelet: Kubectl, node: Manifest) -> None:
    """Create the Node, then write its status through the status subresource."""
    body = copy.deepcopy(node)
    status = body.pop("status")
    kubelet.create(body)
    kubelet.merge_patch("v1", "Node", node["metadata"]["name"], None, {"status": status},
                        subresource="status")


def all_taints(admin: KubernetesAdapter) -> list[Manifest]:
    node = admin.get("v1", "Node", "h100-r2-n4") or {}
    return list((node.get("spec") or {}).get("taints") or [])


def not_ready_taints(admin: KubernetesAdapter) -> list[Manifest]:
    return [taint for taint in all_taints(admin) if taint["key"] == NOT_READY]


def untimed(taints: list[Manifest]) -> list[Manifest]:
    """Taints without ``timeAdded``, in a fixed order: the lifecycle controller re-stamps (and
    so may reorder) its own now and then (a heartbeat late under load), which says nothing about
    what the portal did; Kubernetes gives the order of taints no meaning."""
    stripped = [{k: v for k, v in taint.items() if k != "timeAdded"} for taint in taints]
    return sorted(stripped, key=lambda t: (t["key"], t.get("value", ""), t["effect"]))


def settle(admin: KubernetesAdapter, names: list[str]) -> None:
    """Wait until the controller-manager is done with the new nodes, so that no test's apply
    meets a resourceVersion it changed meanwhile (a 409: the portal reads the node again and
    applies a second time, which the tests' exact lists of writes would count). It
    writes each node once it sees it (the TTL annotation, the beta os and arch labels), taints
    the NotReady node NoSchedule at once and NoExecute at its eviction rate; under load these
    come seconds apart, so the fleet counts as settled once none of the nodes changed over a
    whole node-monitor period (5 s)."""
    def marked() -> bool:
        nodes = [admin.get("v1", "Node", name) or {} for name in names]
        return len(not_ready_taints(admin)) == 2 and all(
            TTL_ANNOTATION in (node["metadata"].get("annotations") or {}) for node in nodes)

    def versions() -> dict[str, str]:
        return {name: (admin.get("v1", "Node", name) or {})["metadata"]["resourceVersion"]
                for name in names}

    # Slow on a loaded machine: 90 s were not enough with two suites on 2 cores.
    wait_for(marked, lambda: "the controller-manager's marks on the new nodes (the NotReady "
             f"node's taints: {[t['key'] for t in all_taints(admin)]})", 2 * HANG_SECONDS)
    before = versions()
    deadline = time.monotonic() + 60.0
    while True:
        time.sleep(NODE_MONITOR_SECONDS)
        now = versions()
        if now == before:
            return
        assert time.monotonic() < deadline, "the nodes kept changing for a minute"
        before = now


@pytest.fixture(scope="package")
def fleet(host_api: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    workdir = tmp_path_factory.mktemp("real-nodes")
    kubelet = Kubectl(host_api, workdir / "kubelet", manager="kubelet")
    kubectl = Kubectl(host_api, workdir / "kubectl", manager="kubectl-edit")
    admin = host_api.adapter()
    nodes = reference_nodes()
    names = [node["metadata"]["name"] for node in nodes]
    heartbeats = Heartbeats(kubelet, names)
    try:
        for node in nodes:
            register(kubelet, node)
        heartbeats.start()
        settle(admin, names)
        yield Fleet(host_api, admin, kubectl,
                    host_api.write_admin_kubeconfig(workdir / "host.kubeconfig"), names,
                    not_ready_taints(admin))
    finally:
        heartbeats.stop()
        for name in names:
            admin.delete("v1", "Node", name)
            admin.delete(LEASE_API, "Lease", name, LEASE_NAMESPACE)
        for client in (kubelet, kubectl):
            client.close()
        admin.close()


# ----- the portal's side, fresh per test


@dataclass
class Portal:
    database: Database
    connector: RecordingConnector
    reconciler: NodeReconciler
    clock: Later  # the runtime's clock, for the resync and retry delays

    def run(self) -> list[tuple[str, str, str]]:
        """One pass at the resync period (the host's key is due); what it wrote (or tried to
        write) to the host."""
        self.connector.forget()
        self.later(RESYNC_SECONDS)
        run_due(self.reconciler, "worker-1")
        return list(self.connector.writes)

    def later(self, seconds: float) -> None:
        self.clock.later(seconds)

    @property
    def host(self) -> RecordingPort:
        assert self.connector.port is not None
        return self.connector.port


@pytest.fixture
def portal(fleet: Fleet, database: Database) -> Portal:
    settings = Settings(env="test", database_url="sqlite://", rack_label=RACK_LABEL,
                        worker_resync_seconds=RESYNC_SECONDS, kubeconfig=str(fleet.kubeconfig))
    connector = RecordingConnector(ClientConnector(settings))
    clock = Later()
    reconciler = NodeReconciler(settings, database, connector, now=clock)
    return Portal(database, connector, reconciler, clock)
