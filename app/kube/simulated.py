"""A simulated host cluster for ``portal dev``: nothing leaves the process.

The host is the in-memory port, seeded with a demo GPU fleet (``app/devdata/host-nodes.json``).
Installing a release starts a simulated control plane: its StatefulSet at once, the Secret
``vc-<release>`` with an admin kubeconfig halfway through ``startup_seconds``, and an API server
that answers /readyz at the end, so a newcomer watches the cluster's conditions move as they
would on a real host. Each virtual cluster is an in-memory port too, serving what the kubeconfig
flow needs (ServiceAccounts, Secrets, RBAC, TokenRequests).

Its servers are under ``.invalid`` (RFC 2606), a name that never resolves: a kubeconfig from
the simulated host cannot connect anywhere, and says so.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from app.kube.manifests.names import kubeconfig_secret_name
from app.kube.memory import InMemoryKube, fake_service_account_token
from app.kube.port import KubePort, Manifest

SIMULATED_DOMAIN = "simulated-host.invalid"
SIMULATED_ENDPOINT_TEMPLATE = "https://{cluster}.{tenant}." + SIMULATED_DOMAIN
DEMO_NODES = Path(__file__).resolve().parents[1] / "devdata" / "host-nodes.json"
ADMIN_TOKEN_SECONDS = 10 * 365 * 24 * 3600
# What KAI's chart installs, reduced to what is looked at: that it exists.
KAI_QUEUE_CRD: Manifest = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "queues.scheduling.run.ai"},
    "spec": {"group": "scheduling.run.ai", "scope": "Cluster",
             "names": {"kind": "Queue", "plural": "queues"}}}


def demo_nodes(path: Path = DEMO_NODES) -> list[Manifest]:
    """The demo fleet: the Node objects of a NodeList file."""
    items: list[Manifest] = json.loads(path.read_text())["items"]
    return items


def control_plane_statefulset(release: str, namespace: str) -> Manifest:
    """What the vCluster chart runs the control plane in."""
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": release, "namespace": namespace,
                         "labels": {"app": "vcluster", "release": release}}}


def kubeconfig_secret(release: str, namespace: str, admin_kubeconfig: str) -> Manifest:
    """The Secret ``vc-<release>`` where vCluster exports its admin kubeconfig (``config``)."""
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": kubeconfig_secret_name(release), "namespace": namespace,
                         "labels": {"app": "vcluster", "vcluster-name": release}},
            "data": {"config": base64.b64encode(admin_kubeconfig.encode()).decode()}}


def simulated_server(namespace: str) -> str:
    return f"https://{namespace}.{SIMULATED_DOMAIN}"


def simulated_admin_kubeconfig(namespace: str) -> str:
    name = f"simulated-{namespace}"
    token = fake_service_account_token("kube-system", "vcluster-admin", None,
                                       ADMIN_TOKEN_SECONDS)
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": simulated_server(namespace)}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    })


@dataclass
class _ControlPlane:
    release: str
    namespace: str
    started: float
    api: InMemoryKube
    exported: bool = False


class SimulatedHost:
    """A ``KubeConnector`` whose host and virtual clusters live in memory."""

    def __init__(self, nodes: list[Manifest], *, startup_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = InMemoryKube(normalize_quantities=True)
        for node in nodes:
            self.kube.seed(node)
        self.kube.seed(KAI_QUEUE_CRD)  # a host with KAI installed, as the health check asks
        self.startup_seconds = startup_seconds
        self.clock = clock
        self._planes: dict[str, _ControlPlane] = {}  # by server URL
        self._elsewhere: dict[str, InMemoryKube] = {}
        self._lock = threading.RLock()

    # ----- the installer's side

    def start_control_plane(self, release: str, namespace: str) -> None:
        """Install or upgrade: a running control plane keeps running (and its state)."""
        with self._lock:
            self.kube.seed(control_plane_statefulset(release, namespace))
            server = simulated_server(namespace)
            if server not in self._planes:
                self._planes[server] = _ControlPlane(release, namespace, self.clock(),
                                                     InMemoryKube())
            self._export_due()

    def stop_control_plane(self, release: str, namespace: str) -> None:
        with self._lock:
            self._planes.pop(simulated_server(namespace), None)
            self.kube.delete("apps/v1", "StatefulSet", release, namespace)
            self.kube.delete("v1", "Secret", kubeconfig_secret_name(release), namespace)

    # ----- the connector

    def host(self) -> KubePort:
        with self._lock:
            self._export_due()
        return self.kube

    def virtual(self, kubeconfig_yaml: str) -> KubePort:
        server = _server_of(kubeconfig_yaml)
        with self._lock:
            plane = self._planes.get(server)
            if plane is not None:
                return plane.api
            # A credential of a cluster no longer running: what it reaches is empty.
            return self._elsewhere.setdefault(server, InMemoryKube())

    def ready(self, kubeconfig_yaml: str) -> bool:
        with self._lock:
            plane = self._planes.get(_server_of(kubeconfig_yaml))
            return plane is not None and self._elapsed(plane) >= self.startup_seconds

    # ----- internals

    def _export_due(self) -> None:
        """Control planes halfway up export their admin kubeconfig, as vCluster's does."""
        for plane in self._planes.values():
            if not plane.exported and self._elapsed(plane) >= self.startup_seconds / 2:
                self.kube.seed(kubeconfig_secret(plane.release, plane.namespace,
                                                 simulated_admin_kubeconfig(plane.namespace)))
                plane.exported = True

    def _elapsed(self, plane: _ControlPlane) -> float:
        return self.clock() - plane.started


def _server_of(kubeconfig_yaml: str) -> str:
    config = yaml.safe_load(kubeconfig_yaml) or {}
    clusters = config.get("clusters") or [{}]
    return str((clusters[0].get("cluster") or {}).get("server") or "")
