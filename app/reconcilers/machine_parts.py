"""What the ``machines`` kind reads and decides without state of its own: the objects it
names, what stops a machine, the phase read from Metal3 and the Node, a private node's CSRs."""

from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass, field

from app.kube.manifests import baremetal as metal3
from app.kube.manifests import labels as lbl
from app.kube.port import CsrDecider, KubePort, Manifest
from app.machines import csr as csrs
from app.machines import join
from app.machines import service as machines_service
from app.machines.lifecycle import Observed
from app.machines.service import MachineSpec
from app.reconcilers.kind import TerminalError

log = logging.getLogger(__name__)
# Metal3 states in which the user data has not been read yet: a token may still be minted.
BEFORE_PROVISIONING = frozenset({"", "unmanaged", "registering", "match profile", "inspecting",
                                 "preparing", "available", "ready"})
# A token with less than this share of its lifetime left is replaced before use.
TOKEN_RENEWAL_SHARE = 0.25
SECRET = ("v1", "Secret")
NODE = ("v1", "Node")
BMH = (metal3.METAL3_API_VERSION, metal3.BAREMETAL_HOST)


class Stuck(Exception):
    """What stops the machine until someone changes the host or the machine: ``reason`` for
    its condition (CamelCase), ``message`` in words."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


CSR = ("certificates.k8s.io/v1", "CertificateSigningRequest")
POD = ("v1", "Pod")
# The label a private node carries in its cluster (a kubelet argument): whose machine it is.
CLUSTER_LABEL = "gpu-tenant-portal/cluster"


@dataclass(frozen=True)
class PrivateCluster:
    """The private-nodes cluster a machine serves, as one pass needs it."""

    cluster_id: int
    tenant_id: int
    name: str
    ready: bool
    kubeconfig: str | None = field(default=None, repr=False)


def settled(spec: MachineSpec, phase: str) -> bool:
    """Nothing to wait for: looked at again at the resync period."""
    if spec.deleting:
        return False
    wanted = "joined" if spec.desired in machines_service.JOINING else "available"
    return phase in (wanted, "failed")


def observed(observation: metal3.HostObservation, node: Manifest | None) -> Observed:
    error_type = observation.error_type or (
        "OperationalError" if observation.has_error else "")
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    allocatable = ((node or {}).get("status") or {}).get("allocatable") or {}
    return Observed(state=observation.state if observation.exists else None,
                    error_type=error_type, error_message=observation.error_message,
                    node_ready=node is not None and ready(node),
                    node_name=str(node["metadata"]["name"]) if node is not None else None,
                    node_gpu_product=str(labels.get(lbl.GPU_PRODUCT, "")),
                    node_gpus=count(allocatable.get(lbl.GPU_RESOURCE)))


def ready(node: Manifest) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def count(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def machines_namespace() -> Manifest:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": metal3.MACHINES_NAMESPACE, "labels": lbl.managed()}}


def delete_join_secrets(host: KubePort, spec: MachineSpec) -> None:
    host.delete(*SECRET, metal3.user_data_secret_name(spec.name), metal3.MACHINES_NAMESPACE)
    if spec.bootstrap_token_id:
        delete_token(host, spec.bootstrap_token_id)


def delete_token(host: KubePort, token_id: str) -> None:
    host.delete(*SECRET, metal3.bootstrap_token_secret_name(token_id),
                metal3.BOOTSTRAP_TOKEN_NAMESPACE)


def decoded(data: dict[str, str], key: str) -> str:
    try:
        return base64.b64decode(data.get(key) or "", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""


def not_yet(host: KubePort, virtual: KubePort | None, spec: MachineSpec,
            cluster: PrivateCluster | None) -> str:
    """Why the machine cannot go on joining its cluster now ('' when it can)."""
    if cluster is None:
        return "its private-nodes cluster is gone"
    if not cluster.ready or virtual is None:
        return (f"waiting for cluster {cluster.name} to be Ready with its node bootstrap "
                "bindings")
    if join.from_kubeconfig(cluster.kubeconfig) is None:
        return (f"cluster {cluster.name}'s admin kubeconfig has no server and CA to join "
                "with")
    if host.get(*NODE, spec.name) is not None:
        return (f"the host cluster has a Node named {spec.name}: vCluster's node sync "
                "would delete the private node of that name; rename or remove it")
    return ""


def decide_csrs(virtual: KubePort, spec: MachineSpec) -> None:
    """The machine's token's CSRs: the one for its node approved, any other denied."""
    token_id = spec.bootstrap_token_id
    if not token_id:
        return
    for request in virtual.list(*CSR):
        if csrs.decided(request) or csrs.bootstrap_token_of(request) != token_id:
            continue
        if not isinstance(virtual, CsrDecider):
            raise TerminalError(f"machine {spec.name}: this client cannot approve CSRs")
        mine = csrs.is_machines(request, token_id, spec.name)
        virtual.decide_csr(
            str(request["metadata"]["name"]), approve=mine,
            reason="GpuTenantPortalApproved" if mine else "GpuTenantPortalDenied",
            message=f"machine {spec.name}'s node" if mine else
            f"bootstrap token {token_id} joins only node {spec.name}")
        log.info("machine %s: CSR %s %s", spec.name, request["metadata"]["name"],
                 "approved" if mine else "denied")


def node_of(host: KubePort, spec: MachineSpec) -> Manifest | None:
    """The machine's Node: named after it, and carrying its providerID (a Node of that name
    from elsewhere is not it)."""
    node = host.get(*NODE, spec.name)
    if node is None or (node.get("spec") or {}).get("providerID") != metal3.provider_id(
            spec.name):
        return None
    return node
