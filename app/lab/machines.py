"""The lab's bare-metal machines booting: what a provisioned machine's kubelet would do.

The baremetal-operator (``app.lab.metal3``) takes a BareMetalHost of ``portal-machines`` to
``provisioned`` with an image and user data, and no machine boots. This play does what the
image would on first boot: it reads the host's user data (a ``#cloud-config`` whose
``write_files`` hold the kubelet's bootstrap kubeconfig and its ``/etc/default/kubelet``) and
registers the Node with that bootstrap token on the host's API server, which checks the token
(unknown or expired: no Node). The Node carries the provider ID from the kubelet's arguments
and the GPUs of the lab's hardware table for the host's boot MAC, and is kwok's to keep Ready,
like the lab's fleet. When the host leaves ``provisioned`` (deprovisioning wipes the disk), or
is deleted, its Node goes.

A machine whose user data names a virtual cluster's endpoint (``*.vc.lab``: a private-nodes
cluster, issue 57) joins that cluster instead, as a kubelet does: a real TLS bootstrap through
the lab's proxy, the Node registered with the issued certificate, kwok for that cluster keeping
it Ready (``app.lab.kubelet_bootstrap``). Its Node is deleted there when the host is
deprovisioned. The play remembers what it booted; a Node the portal deletes while the machine
is still provisioned is not registered again (a real kubelet would).
"""

from __future__ import annotations

import base64
import binascii
import logging
import shlex
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
import yaml

from app.kube.errors import KubeError
from app.kube.port import KubePort, Manifest
from app.lab import host
from app.lab.control_plane import fast_adapter
from app.lab.gpu import gpu_node
from app.lab.kubelet_bootstrap import (
    CERTIFICATE_WAIT_SECONDS,
    KUBELET_LABELS,
    BootstrapKubeconfig,
    JoinError,
    NodeCredentials,
    VirtualKubelet,
    VirtualKwoks,
    delete_node,
    is_virtual_endpoint,
    kubeconfig_server,
    read_bootstrap_kubeconfig,
)
from app.lab.metal3 import METAL3_API

log = logging.getLogger(__name__)

MACHINES_NAMESPACE = "portal-machines"
# The group the portal's bootstrap tokens carry (the Secret's auth-extra-groups).
BOOTSTRAPPERS = "system:bootstrappers:gpu-tenant-portal"
BOOTSTRAP_ROLE = "lab:machine-bootstrap"
BOOTSTRAP_KUBECONFIG = "/etc/kubernetes/bootstrap-kubelet.conf"
KUBELET_DEFAULTS = "/etc/default/kubelet"
PROVIDER_PREFIX = "metal3://"


class BootError(ValueError):
    """User data a machine could not boot from."""


@dataclass(frozen=True)
class Hardware:
    """What GPU Feature Discovery would label a machine with once it runs."""

    product: str
    gpus: int
    gpu_memory_mib: int
    family: str
    model: str
    rack: str
    mig_capable: bool = False

    def labels(self) -> dict[str, str]:
        return {
            "node.kubernetes.io/instance-type": self.model,
            "topology.kubernetes.io/region": "eu-central",
            "topology.kubernetes.io/zone": "eu-central-a",
            "network.topology.example.com/rack": self.rack,
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.count": str(self.gpus),
            "nvidia.com/gpu.memory": str(self.gpu_memory_mib),
            "nvidia.com/gpu.family": self.family,
            "nvidia.com/gpu.machine": self.model,
            "nvidia.com/mig.capable": "true" if self.mig_capable else "false",
        }


_H100 = Hardware("NVIDIA-H100-80GB-HBM3", 8, 81559, "hopper", "DGX-H100", "rack-5",
                 mig_capable=True)
_L40S = Hardware("NVIDIA-L40S", 4, 46068, "ada-lovelace", "SYS-421GE-TNRT", "rack-6")
# The machines the lab's BMCs "have", by boot MAC: spare servers not yet in the fleet.
LAB_HARDWARE: dict[str, Hardware] = {
    "52:54:00:a1:00:01": _H100,
    "52:54:00:a1:00:02": _H100,
    "52:54:00:a1:00:03": _H100,
    "52:54:00:a1:00:04": _H100,
    "52:54:00:b1:00:01": _L40S,
    "52:54:00:b1:00:02": _L40S,
}


@dataclass(frozen=True)
class BootConfig:
    """What the kubelet of a booted machine reads from the files cloud-init wrote."""

    kubeconfig: str
    provider_id: str
    node_name: str
    node_labels: dict[str, str] = field(default_factory=dict)


def boot_config(user_data: str) -> BootConfig:
    if not user_data.startswith("#cloud-config"):
        raise BootError("the user data is not a #cloud-config document")
    try:
        document = yaml.safe_load(user_data)
    except yaml.YAMLError as error:
        raise BootError(f"the user data is not YAML: {error}") from None
    files = _written_files(document.get("write_files") if isinstance(document, dict) else None)
    kubeconfig = files.get(BOOTSTRAP_KUBECONFIG)
    if not kubeconfig:
        raise BootError(f"the user data writes no {BOOTSTRAP_KUBECONFIG}")
    arguments = kubelet_arguments(files.get(KUBELET_DEFAULTS, ""))
    provider_id = arguments.get("--provider-id", "")
    node_name = arguments.get("--hostname-override", "")
    if not provider_id.startswith(PROVIDER_PREFIX) or not node_name:
        raise BootError(f"{KUBELET_DEFAULTS} names no metal3:// --provider-id and "
                        "--hostname-override")
    labels = dict(item.partition("=")[::2]
                  for item in arguments.get("--node-labels", "").split(",") if "=" in item)
    return BootConfig(kubeconfig, provider_id, node_name, labels)


def _written_files(entries: Any) -> dict[str, str]:
    if not isinstance(entries, list):
        raise BootError("the user data has no write_files list")
    files = {}
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            files[entry["path"]] = _content(entry)
    return files


def _content(entry: dict[str, Any]) -> str:
    content = str(entry.get("content") or "")
    if entry.get("encoding") not in ("b64", "base64"):
        return content
    try:
        return base64.b64decode(content, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise BootError(f"{entry['path']} is not base64 text") from None


def kubelet_arguments(defaults: str) -> dict[str, str]:
    """``--flag=value`` pairs of ``KUBELET_EXTRA_ARGS`` in an ``/etc/default/kubelet``."""
    for line in defaults.splitlines():
        name, _, value = line.strip().partition("=")
        if name == "KUBELET_EXTRA_ARGS":
            words = shlex.split(value)
            if len(words) == 1 and " " in words[0]:  # the whole value quoted
                words = shlex.split(words[0])
            return dict(word.partition("=")[::2] for word in words if word.startswith("--"))
    return {}


def machine_node(config: BootConfig, hardware: Hardware) -> Manifest:
    node = gpu_node(config.node_name, hardware.product, hardware.gpus, **hardware.labels())
    node["spec"] = {"providerID": config.provider_id}
    return node


def private_machine_node(config: BootConfig, hardware: Hardware) -> Manifest:
    """The Node a kubelet registers in its virtual cluster: its own labels and the
    ``--node-labels`` of its arguments too (NodeRestriction allows all of them)."""
    node = machine_node(config, hardware)
    node["metadata"]["labels"].update({**KUBELET_LABELS, **config.node_labels})
    return node


def bootstrap_rbac() -> list[Manifest]:
    """What the portal's bootstrap tokens may do in the lab: register their machine's Node (a
    kubelet's TLS bootstrap, a CSR first, is not played)."""
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": BOOTSTRAP_ROLE},
         "rules": [{"apiGroups": [""], "resources": ["nodes"],
                    "verbs": ["create", "get", "patch"]},
                   {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": BOOTSTRAP_ROLE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": BOOTSTRAP_ROLE},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                       "name": BOOTSTRAPPERS}]},
    ]


def join(config: BootConfig, hardware: Hardware) -> None:
    """Register the machine's Node as its kubelet would: with the bootstrap token only."""
    kubelet = fast_adapter(config.kubeconfig)
    try:
        host.add_fleet(kubelet, [machine_node(config, hardware)])
    finally:
        kubelet.close()


def provider_id(host_name: str, namespace: str = MACHINES_NAMESPACE) -> str:
    return f"{PROVIDER_PREFIX}{namespace}/{host_name}"


@dataclass
class PendingJoin:
    """A machine's CSR posted to its virtual cluster, waiting for approval and signature."""

    config: BootConfig
    hardware: Hardware
    bootstrap: BootstrapKubeconfig
    key_pem: bytes
    csr_name: str
    deadline: float


@dataclass(frozen=True)
class PrivateNode:
    server: str
    node_name: str
    # The kubelet's client certificate, kept for checks that the host refuses it.
    credentials: NodeCredentials


@dataclass
class MachineBoots:
    """Each ``step()`` boots the provisioned hosts without a Node and removes the Nodes of
    hosts no longer provisioned; a machine that cannot join says why once in the log."""

    admin: KubePort
    namespace: str = MACHINES_NAMESPACE
    hardware: dict[str, Hardware] = field(default_factory=lambda: dict(LAB_HARDWARE))
    problems: dict[str, str] = field(default_factory=dict)
    # Virtual clusters: the lab's proxy, and one kwok per cluster with machines.
    proxy: str | None = None
    kwoks: VirtualKwoks | None = None
    certificate_wait: float = CERTIFICATE_WAIT_SECONDS
    pending: dict[str, PendingJoin] = field(default_factory=dict)
    private: dict[str, PrivateNode] = field(default_factory=dict)
    transport: httpx.BaseTransport | None = None  # tests: the virtual API servers' stand-in

    def run(self, stopping: threading.Event, interval: float = 1.0) -> None:
        while not stopping.wait(interval):
            try:
                self.step()
            except KubeError as error:
                log.warning("machine boots: %s", error)

    def step(self) -> None:
        hosts = self.admin.list(METAL3_API, "BareMetalHost", self.namespace)
        provisioned = {provider_id(h["metadata"]["name"], self.namespace): h for h in hosts
                       if _state(h) == "provisioned"}
        nodes = {n["spec"]["providerID"]: n for n in self._machine_nodes()}
        for gone in nodes.keys() - provisioned.keys():
            self.admin.delete("v1", "Node", nodes[gone]["metadata"]["name"])
            log.info("machine %s deprovisioned: its Node %s removed", gone,
                     nodes[gone]["metadata"]["name"])
        for gone in (self.private.keys() | self.pending.keys()) - provisioned.keys():
            self._leave_virtual(gone)
        for waiting in list(self.pending):
            self._finish_join(waiting)
        if self.kwoks is not None:
            self.kwoks.keep({node.server for node in self.private.values()})
        joined = nodes.keys() | self.private.keys() | self.pending.keys()
        for booting in provisioned.keys() - joined:
            self._boot(provisioned[booting])

    def _machine_nodes(self) -> Iterable[Manifest]:
        prefix = provider_id("", self.namespace)
        return [node for node in self.admin.list("v1", "Node")
                if str((node.get("spec") or {}).get("providerID", "")).startswith(prefix)]

    def _boot(self, bare_metal_host: Manifest) -> None:
        name = bare_metal_host["metadata"]["name"]
        try:
            config = boot_config(self._user_data(bare_metal_host))
            mac = str(bare_metal_host["spec"].get("bootMACAddress", "")).lower()
            if mac not in self.hardware:
                raise BootError(f"the lab has no machine with boot MAC {mac!r}")
            bootstrap = read_bootstrap_kubeconfig(config.kubeconfig)
            if is_virtual_endpoint(bootstrap.server):
                self._start_virtual_join(config, self.hardware[mac], bootstrap)
                return
            join(config, self.hardware[mac])
        except (BootError, KubeError, JoinError, httpx.HTTPError) as error:
            self._problem(name, str(error))
            return
        self.problems.pop(name, None)
        log.info("machine %s booted and joined as Node %s", name, config.node_name)

    # ----- a virtual cluster's machines

    def _start_virtual_join(self, config: BootConfig, hardware: Hardware,
                            bootstrap: BootstrapKubeconfig) -> None:
        """Post the kubelet's CSR with the bootstrap token; ``_finish_join`` waits for it."""
        self._virtual_admin(bootstrap.server)  # no CSR for a cluster the lab cannot serve
        kubelet = VirtualKubelet(bootstrap, self.proxy, transport=self.transport)
        key_pem, csr_name = kubelet.request_certificate(config.node_name)
        self.pending[config.provider_id] = PendingJoin(
            config, hardware, bootstrap, key_pem, csr_name,
            time.monotonic() + self.certificate_wait)
        log.info("machine %s booted: CSR %s posted to %s", config.provider_id, csr_name,
                 bootstrap.server)

    def _finish_join(self, provider: str) -> None:
        join_ = self.pending[provider]
        kubelet = VirtualKubelet(join_.bootstrap, self.proxy, transport=self.transport)
        try:
            certificate = kubelet.certificate(join_.csr_name)
            if certificate is None:
                if time.monotonic() > join_.deadline:
                    del self.pending[provider]  # the next step boots it again: a new CSR
                    raise JoinError(f"CSR {join_.csr_name} not approved and signed within "
                                    f"{self.certificate_wait:.0f}s")
                return
            credentials = NodeCredentials(join_.key_pem, certificate, join_.csr_name)
            admin = self._virtual_admin(join_.bootstrap.server)
            if self.kwoks is not None:
                self.kwoks.ensure(join_.bootstrap.server, admin)
            kubelet.register(private_machine_node(join_.config, join_.hardware), credentials)
        except (JoinError, KubeError, httpx.HTTPError) as error:
            # Denied: the next step boots it again; otherwise tried again until the deadline.
            if "denied" in str(error) or time.monotonic() > join_.deadline:
                self.pending.pop(provider, None)
            self._problem(provider, str(error))
            return
        del self.pending[provider]
        self.private[provider] = PrivateNode(join_.bootstrap.server, join_.config.node_name,
                                             credentials)
        self.problems.pop(provider, None)
        log.info("machine %s joined %s as Node %s", provider, join_.bootstrap.server,
                 join_.config.node_name)

    def _leave_virtual(self, provider: str) -> None:
        self.pending.pop(provider, None)
        node = self.private.pop(provider, None)
        if node is None:
            return
        try:
            delete_node(self._virtual_admin(node.server), node.node_name, self.proxy,
                        self.transport)
        except (JoinError, KubeError, httpx.HTTPError) as error:  # the cluster may be gone
            log.warning("machine %s deprovisioned; its Node %s in %s stays: %s", provider,
                        node.node_name, node.server, error)
            return
        log.info("machine %s deprovisioned: its Node %s removed from %s", provider,
                 node.node_name, node.server)

    def _virtual_admin(self, server: str) -> str:
        """The virtual cluster's admin kubeconfig: the host Secret vc-<release> (key config)
        whose server is the one the machine joins."""
        for secret in self.admin.list("v1", "Secret"):
            name = secret["metadata"]["name"]
            encoded = (secret.get("data") or {}).get("config")
            if not name.startswith("vc-") or name.startswith("vc-config-") or not encoded:
                continue
            text = base64.b64decode(encoded).decode()
            if kubeconfig_server(text) == server:
                return text
        raise JoinError(f"no admin kubeconfig on the host for {server}")

    def _user_data(self, bare_metal_host: Manifest) -> str:
        reference = bare_metal_host["spec"].get("userData") or {}
        if not reference.get("name"):
            raise BootError("no user data (spec.userData names no Secret)")
        secret = self.admin.get("v1", "Secret", reference["name"],
                                reference.get("namespace") or self.namespace)
        encoded = ((secret or {}).get("data") or {}).get("userData")
        if not encoded:
            raise BootError(f"Secret {reference['name']} holds no userData")
        return base64.b64decode(encoded).decode()

    def _problem(self, name: str, message: str) -> None:
        if self.problems.get(name) != message:
            log.warning("machine %s cannot join: %s", name, message)
        self.problems[name] = message


def _state(bare_metal_host: Manifest) -> str:
    status = bare_metal_host.get("status") or {}
    return str((status.get("provisioning") or {}).get("state") or "")
