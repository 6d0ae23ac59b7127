"""A simulated host cluster for ``portal dev``: nothing leaves the process.

The host is the in-memory port, seeded with a demo GPU fleet (``app/devdata/host-nodes.json``).
Installing a release starts a simulated control plane: its StatefulSet at once, the Secret
``vc-<release>`` with an admin kubeconfig halfway through ``startup_seconds``, and an API server
that answers /readyz at the end, so a newcomer watches the cluster's conditions move as they
would on a real host. Each virtual cluster is an in-memory port too, serving what the kubeconfig
flow needs (ServiceAccounts, Secrets, RBAC, TokenRequests).

Its Metal3 (``simulated_metal3.py``) takes bare-metal machines through their states in steps of
half ``startup_seconds``: spare servers answer at the boot MACs of
``app/devdata/spare-machines.json`` and join as nodes; the host publishes the ``cluster-info``
kubeadm does, so that they have a server and CA to join with.

Its servers are under ``.invalid`` (RFC 2606), a name that never resolves: a kubeconfig from
the simulated host cannot connect anywhere, and says so.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from app.kube.manifests.baremetal import BAREMETAL_HOST, METAL3_API_VERSION
from app.kube.manifests.names import kubeconfig_secret_name
from app.kube.memory import InMemoryKube, fake_service_account_token
from app.kube.port import KubePort, Manifest
from app.kube.simulated_metal3 import SimulatedMetal3, spare_machines, spares_in_words

SIMULATED_DOMAIN = "simulated-host.invalid"
SIMULATED_ENDPOINT_TEMPLATE = "https://{cluster}.{tenant}." + SIMULATED_DOMAIN
SIMULATED_HOST_SERVER = f"https://host.{SIMULATED_DOMAIN}:6443"
# Stands for the host's CA in what a joining machine is given; it verifies nothing.
SIMULATED_CA = b"-----BEGIN CERTIFICATE-----\nsimulated host CA\n-----END CERTIFICATE-----\n"
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


@cache
def spares_on_the_simulated_host() -> str:
    """The boot MACs the simulated host's spare machines answer at, in words."""
    return spares_in_words(spare_machines(demo_nodes()))


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


def cluster_info(server: str, ca_pem: bytes) -> Manifest:
    """What kubeadm publishes in kube-public: where the host's API server is, and its CA."""
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "", "cluster": {
        "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}]}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cluster-info", "namespace": "kube-public"},
            "data": {"kubeconfig": yaml.safe_dump(kubeconfig)}}


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
        self.kube.seed(cluster_info(SIMULATED_HOST_SERVER, SIMULATED_CA))
        self.startup_seconds = startup_seconds
        self.metal3 = SimulatedMetal3(self.kube, spare_machines(nodes),
                                      step_seconds=startup_seconds / 2)
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
            self.metal3.advance(self.clock())
        return _HostApi(self)

    def metal3_sees(self) -> None:
        """Metal3's watch: a BareMetalHost written is seen at once."""
        with self._lock:
            self.metal3.advance(self.clock())

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


class _HostApi:
    """The simulated host's API as a client reaches it: its in-memory port, watched by its
    Metal3."""

    def __init__(self, host: SimulatedHost) -> None:
        self._host = host
        self._kube = host.kube

    def apply(self, obj: Manifest, *, force: bool = False) -> Manifest:
        stored = self._kube.apply(obj, force=force)
        if (obj.get("apiVersion"), obj.get("kind")) == (METAL3_API_VERSION, BAREMETAL_HOST):
            self._host.metal3_sees()
        return stored

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> Manifest | None:
        return self._kube.get(api_version, kind, name, namespace)

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             label_selector: Mapping[str, str] | None = None,
             field_selector: Mapping[str, str] | None = None) -> list[Manifest]:
        return self._kube.list(api_version, kind, namespace, label_selector, field_selector)

    def delete(self, api_version: str, kind: str, name: str,
               namespace: str | None = None) -> bool:
        return self._kube.delete(api_version, kind, name, namespace)

    def request_token(self, namespace: str, service_account: str, *, expiration_seconds: int,
                      bound_secret: str | None) -> str:
        return self._kube.request_token(namespace, service_account,
                                        expiration_seconds=expiration_seconds,
                                        bound_secret=bound_secret)


def _server_of(kubeconfig_yaml: str) -> str:
    config = yaml.safe_load(kubeconfig_yaml) or {}
    clusters = config.get("clusters") or [{}]
    return str((clusters[0].get("cluster") or {}).get("server") or "")
