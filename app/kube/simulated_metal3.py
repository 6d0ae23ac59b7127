"""Metal3 on the simulated host of ``portal dev``: the baremetal-operator's part and the first
boot of the machines it provisions, in memory, in seconds.

The simulated host has spare servers (``app/devdata/spare-machines.json``): each answers at a
boot MAC and, once provisioned, joins as a node like one of the demo fleet's (its GPUs and
labels), in its own rack; the MACs and GPUs are the lab's (``app/lab/machines.py``). A
BareMetalHost of ``portal-machines`` goes the way the operator takes it: ``registering``,
``inspecting``, ``available``; with an image ``provisioning`` then ``provisioned``; without
one again, ``deprovisioning`` then ``available``. Each step takes ``step_seconds``; what the
operator does on seeing a change (starting to provision or to deprovision) is at once. A boot
MAC no spare answers at fails registration, saying which MACs answer and that a real machine
needs a real host (``make lab``).

One step after ``provisioned``, the machine boots: it reads its user data as cloud-init would
(the bootstrap kubeconfig and ``/etc/default/kubelet``), and its kubelet registers the Node
under the name and provider ID given there, when the bootstrap token is one the host knows and
has not expired; an unknown token joins nothing. The Node goes when the host leaves
``provisioned`` (deprovisioning wipes the disk) or is deleted. The operator's status is written
as a controller writes it (``seed_status``), the Node as the kubelet's: never the portal's.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import logging
import shlex
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from app.kube.manifests import baremetal as metal3
from app.kube.memory import InMemoryKube
from app.kube.port import Manifest

log = logging.getLogger(__name__)

SPARE_MACHINES = Path(__file__).resolve().parents[1] / "devdata" / "spare-machines.json"
BMH = (metal3.METAL3_API_VERSION, metal3.BAREMETAL_HOST)
RACK_LABEL = "network.topology.example.com/rack"
HOSTNAME_LABEL = "kubernetes.io/hostname"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"
REGISTRATION_ERROR = "registration error"


@dataclass(frozen=True)
class SpareMachine:
    """A server of the simulated host: its boot MAC, and the Node it becomes once it joins."""

    boot_mac: str
    node: Manifest  # a demo node's labels and status, in the spare's rack

    @property
    def product(self) -> str:
        return str(self.node["metadata"]["labels"].get(GPU_PRODUCT_LABEL, ""))

    @property
    def gpus(self) -> int:
        return int(str(self.node["status"]["allocatable"].get(GPU_RESOURCE, "0")))


def spare_machines(fleet: list[Manifest], path: Path = SPARE_MACHINES) -> list[SpareMachine]:
    """The spares of ``spare-machines.json``, each like the node of ``fleet`` it names (one
    naming no node of it is left out)."""
    by_name = {str(node["metadata"]["name"]): node for node in fleet}
    spares = []
    for entry in json.loads(path.read_text())["machines"]:
        if entry["like"] not in by_name:
            continue
        node = copy.deepcopy(by_name[entry["like"]])
        node["metadata"]["labels"][RACK_LABEL] = entry["rack"]
        spares.append(SpareMachine(str(entry["bootMACAddress"]).lower(), node))
    return spares


def spares_in_words(spares: list[SpareMachine]) -> str:
    """``52:54:00:a1:00:01 to 52:54:00:a1:00:04 (8 NVIDIA-H100-80GB-HBM3 GPUs each)``, one
    group per kind of machine, in the file's order."""
    groups: dict[tuple[str, int], list[str]] = {}
    for spare in spares:
        groups.setdefault((spare.product, spare.gpus), []).append(spare.boot_mac)
    return "; ".join(f"{macs[0] if len(macs) == 1 else f'{macs[0]} to {macs[-1]}'} "
                     f"({gpus} {product} GPUs each)" for (product, gpus), macs in groups.items())


@dataclass
class _Progress:
    """Where the simulated operator has one host: its state since when, the image it wrote,
    the Node its machine registered."""

    state: str
    since: float
    image: Manifest | None = None
    error: str = ""
    booted: bool = False
    node: str | None = None


class SimulatedMetal3:
    """Takes the BareMetalHosts of ``portal-machines`` through their states; ``advance`` is
    called with the clock whenever the host is reached, as the control planes boot."""

    def __init__(self, kube: InMemoryKube, spares: list[SpareMachine], *,
                 step_seconds: float) -> None:
        self.kube = kube
        self.spares = {spare.boot_mac: spare for spare in spares}
        self.step_seconds = step_seconds
        self._hosts: dict[str, _Progress] = {}

    def advance(self, now: float) -> None:
        found = {str(bmh["metadata"]["name"]): bmh for bmh in self.kube.objects(BMH[1])
                 if (bmh["metadata"].get("namespace") == metal3.MACHINES_NAMESPACE
                     and bmh.get("apiVersion") == BMH[0])}
        for name in set(self._hosts) - set(found):
            self._wiped(self._hosts.pop(name))  # deleted: Metal3 detached it
        for name, bmh in found.items():
            progress = self._hosts.get(name)
            if progress is None:
                progress = self._hosts[name] = _Progress("registering", now)
                self._report(name, progress)
            if self._walk(bmh, progress, now):
                self._report(name, progress)
            self._boot(name, bmh, progress, now)

    # ----- the operator

    def _walk(self, bmh: Manifest, progress: _Progress, now: float) -> bool:
        """Every step due by ``now``; whether the state changed."""
        moved = False
        while not progress.error:
            found = self._next(bmh, progress)
            if found is None:
                return moved
            state, wait = found
            if now - progress.since < wait:
                return moved
            progress.since = progress.since + wait if wait else now
            moved = True
            if state == REGISTRATION_ERROR:
                progress.error = self._unknown_mac(bmh)
                continue
            if state == "provisioned":
                progress.image = copy.deepcopy((bmh.get("spec") or {}).get("image"))
            if state == "available":
                progress.image = None
            if state == "provisioning":
                progress.booted = False
            if state != "provisioned" and progress.node is not None:
                self._wiped(progress)
            progress.state = state
        return moved

    def _next(self, bmh: Manifest, progress: _Progress) -> tuple[str, float] | None:
        """The next state and how long after the current one began it comes."""
        step = self.step_seconds
        wants_image = bool((bmh.get("spec") or {}).get("image"))
        state = progress.state
        if state == "registering":
            mac = str((bmh.get("spec") or {}).get("bootMACAddress") or "").lower()
            return ("inspecting", step) if mac in self.spares else (REGISTRATION_ERROR, step)
        if state == "inspecting":
            return "available", step
        if state == "available":
            return ("provisioning", 0.0) if wants_image else None
        if state == "provisioning":
            return ("provisioned", step) if wants_image else ("deprovisioning", 0.0)
        if state == "provisioned":
            return None if wants_image else ("deprovisioning", 0.0)
        if state == "deprovisioning":
            return "available", step
        return None

    def _unknown_mac(self, bmh: Manifest) -> str:
        mac = (bmh.get("spec") or {}).get("bootMACAddress") or ""
        return (f"no machine answers at boot MAC {mac} on the simulated host of `portal dev`: "
                f"its spare machines boot from {spares_in_words(list(self.spares.values()))}; "
                "delete this machine and register it again with one of those, or run a real "
                "host (`make lab`) for other machines")

    def _report(self, name: str, progress: _Progress) -> None:
        provisioning: Manifest = {"state": progress.state}
        if progress.image is not None:
            provisioning["image"] = copy.deepcopy(progress.image)
        status: Manifest = {"provisioning": provisioning, "operationalStatus": "OK",
                            "poweredOn": progress.state in ("provisioning", "provisioned"),
                            "errorType": "", "errorMessage": "", "errorCount": 0}
        if progress.error:
            status.update(operationalStatus=metal3.OPERATIONAL_ERROR,
                          errorType=REGISTRATION_ERROR, errorMessage=progress.error,
                          errorCount=1)
        self.kube.seed_status(*BMH, name, metal3.MACHINES_NAMESPACE, status)

    # ----- the machine's first boot

    def _boot(self, name: str, bmh: Manifest, progress: _Progress, now: float) -> None:
        if (progress.state != "provisioned" or progress.booted
                or now - progress.since < self.step_seconds):
            return
        progress.booted = True
        spare = self.spares.get(str((bmh.get("spec") or {}).get("bootMACAddress")).lower())
        user_data = ((bmh.get("spec") or {}).get("userData") or {}).get("name")
        if spare is None or not user_data:
            return  # imaged without user data: nothing joins
        try:
            node_name, provider, token = _boot_config(self._secret(
                str(user_data), metal3.MACHINES_NAMESPACE, metal3.USER_DATA_KEY))
        except ValueError as error:
            log.warning("simulated machine %s does not boot: %s", name, error)
            return
        if not self._token_known(token):
            log.warning("simulated machine %s: the host refuses its bootstrap token", name)
            return
        node = copy.deepcopy(spare.node)
        node["metadata"] = {"name": node_name, "labels": {
            **node["metadata"]["labels"], HOSTNAME_LABEL: node_name}}
        node["spec"] = {"providerID": provider}
        self.kube.seed(node)
        progress.node = node_name

    def _wiped(self, progress: _Progress) -> None:
        if progress.node is not None:
            self.kube.delete("v1", "Node", progress.node)
        progress.node, progress.booted = None, False

    def _secret(self, name: str, namespace: str, key: str) -> str:
        found = self.kube.objects("Secret")
        secret = next((s for s in found if s["metadata"]["name"] == name
                       and s["metadata"].get("namespace") == namespace), None)
        try:
            return base64.b64decode(((secret or {}).get("data") or {}).get(key) or "",
                                    validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return ""

    def _token_known(self, token: str) -> bool:
        """The API server's check of a bootstrap token: its Secret, its secret half, and an
        expiration not passed."""
        token_id, _, secret = token.partition(".")
        name = metal3.bootstrap_token_secret_name(token_id)
        namespace = metal3.BOOTSTRAP_TOKEN_NAMESPACE
        if not secret or self._secret(name, namespace, "token-secret") != secret:
            return False
        try:
            expiration = datetime.fromisoformat(
                self._secret(name, namespace, "expiration").replace("Z", "+00:00"))
        except ValueError:
            return False
        return expiration > datetime.now(UTC)


def _boot_config(user_data: str) -> tuple[str, str, str]:
    """The node name, provider ID and bootstrap token a machine's cloud-config gives its
    kubelet."""
    if not user_data.startswith("#cloud-config"):
        raise ValueError("its user data is not a #cloud-config document")
    try:
        document: Any = yaml.safe_load(user_data)
    except yaml.YAMLError as error:
        raise ValueError(f"its user data is not YAML: {error}") from None
    files = {str(f.get("path")): str(f.get("content") or "")
             for f in (document or {}).get("write_files") or [] if isinstance(f, dict)}
    kubeconfig = yaml.safe_load(files.get(metal3.BOOTSTRAP_KUBECONFIG_PATH) or "{}") or {}
    users = kubeconfig.get("users") or [{}]
    token = str((users[0].get("user") or {}).get("token") or "")
    defaults = files.get(metal3.KUBELET_DEFAULTS_PATH, "").strip()
    arguments = dict(word.split("=", 1) for word in shlex.split(
        defaults.removeprefix("KUBELET_EXTRA_ARGS=")) if "=" in word)
    node_name = arguments.get("--hostname-override", "")
    provider = arguments.get("--provider-id", "")
    if not (token and node_name and provider):
        raise ValueError("its user data gives the kubelet no token, node name or provider ID")
    return node_name, provider, token
