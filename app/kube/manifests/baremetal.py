"""Bare-metal GPU machines driven through Metal3's baremetal-operator (metal3.io/v1alpha1).

Per machine the portal keeps, on the machine's host cluster: a BareMetalHost and its BMC Secret
in ``MACHINES_NAMESPACE``; while it provisions, a user-data Secret (cloud-config that joins the
host cluster) and a bootstrap token Secret in kube-system. ``host_observation`` reads what the
operator reports back. Field names and allowed values follow baremetal-operator v0.6.0.
"""

import base64
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final, Literal, get_args
from urllib.parse import urlsplit

import yaml

from app.kube.manifests import labels as lbl
from app.kube.manifests.names import is_dns_label

Manifest = dict[str, Any]

METAL3_API_VERSION: Final = "metal3.io/v1alpha1"
BAREMETAL_HOST: Final = "BareMetalHost"
MACHINES_NAMESPACE: Final = "portal-machines"
BOOTSTRAP_GROUP: Final = "system:bootstrappers:gpu-tenant-portal"
BOOTSTRAP_TOKEN_NAMESPACE: Final = "kube-system"  # noqa: S105 - a namespace
BOOTSTRAP_TOKEN_TYPE: Final = "bootstrap.kubernetes.io/token"  # noqa: S105 - a Secret type
BOOTSTRAP_KUBECONFIG_PATH: Final = "/etc/kubernetes/bootstrap-kubelet.conf"
KUBELET_DEFAULTS_PATH: Final = "/etc/default/kubelet"
USER_DATA_KEY: Final = "userData"
# The operator only watches Secrets with this label; it adds it itself on first use, but with
# it already there the first read needs no round trip past its cache.
METAL3_SECRET_LABEL: Final = {"environment.metal3.io": "baremetal"}

ChecksumType = Literal["md5", "sha256", "sha512", "auto"]
DiskFormat = Literal["raw", "qcow2", "vdi", "vmdk", "live-iso"]
CHECKSUM_TYPES: Final[tuple[str, ...]] = get_args(ChecksumType)
DISK_FORMATS: Final[tuple[str, ...]] = get_args(DiskFormat)

_MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
_TOKEN_ALPHABET: Final = "abcdefghijklmnopqrstuvwxyz0123456789"  # noqa: S105 - the format's
_TOKEN_ID = re.compile(r"^[a-z0-9]{6}$")
_TOKEN_SECRET = re.compile(r"^[a-z0-9]{16}$")


class ProvisioningState(StrEnum):
    """Every value of status.provisioning.state in baremetal-operator v0.6.0."""

    NONE = ""
    UNMANAGED = "unmanaged"
    REGISTERING = "registering"
    MATCH_PROFILE = "match profile"  # obsolete; passes straight to preparing
    INSPECTING = "inspecting"
    PREPARING = "preparing"
    READY = "ready"  # the deprecated name of available
    AVAILABLE = "available"
    PROVISIONING = "provisioning"
    PROVISIONED = "provisioned"
    EXTERNALLY_PROVISIONED = "externally provisioned"
    DEPROVISIONING = "deprovisioning"
    POWERING_OFF_BEFORE_DELETE = "powering off before delete"
    DELETING = "deleting"


# status.operationalStatus: "" (not yet reported), OK, discovered, error, delayed, detached.
OPERATIONAL_ERROR: Final = "error"


# ----- names


def check_machine_name(machine: str) -> None:
    """A machine name the host objects can carry: a DNS label (Secret names, label values) that
    is not a UUID (the operator's webhook refuses UUID-shaped BareMetalHost names)."""
    if not is_dns_label(machine):
        raise ValueError(f"machine name is not a DNS-1123 label: {machine!r}")
    try:
        uuid.UUID(machine)
    except ValueError:
        return
    raise ValueError(f"machine name must not be a UUID: {machine!r}")


def bmc_secret_name(machine: str) -> str:
    return f"{machine}-bmc"


def user_data_secret_name(machine: str) -> str:
    return f"{machine}-user-data"


def bootstrap_token_secret_name(token_id: str) -> str:
    return f"bootstrap-token-{token_id}"


def provider_id(machine: str) -> str:
    """The Node's spec.providerID the kubelet is told to report, which ties a Node to its
    machine."""
    return f"metal3://{MACHINES_NAMESPACE}/{machine}"


def machine_labels(machine: str) -> dict[str, str]:
    return lbl.managed(**{lbl.MACHINE: machine})


# ----- Secrets


def _secret(name: str, namespace: str, labels: dict[str, str], data: Mapping[str, str],
            secret_type: str = "Opaque") -> Manifest:  # noqa: S107 - a Secret type
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "type": secret_type,
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
    }


def bmc_secret(machine: str, username: str, password: str) -> Manifest:
    """The BMC credentials the BareMetalHost names (the operator requires both keys)."""
    check_machine_name(machine)
    labels = {**machine_labels(machine), **METAL3_SECRET_LABEL}
    return _secret(bmc_secret_name(machine), MACHINES_NAMESPACE, labels,
                   {"username": username, "password": password})


@dataclass(frozen=True)
class BootstrapToken:
    """A kubelet bootstrap token, ``<id>.<secret>`` (the format the API server authenticates)."""

    token_id: str
    secret: str

    def __post_init__(self) -> None:
        if not _TOKEN_ID.fullmatch(self.token_id) or not _TOKEN_SECRET.fullmatch(self.secret):
            raise ValueError("a bootstrap token is a 6-character id and a 16-character secret "
                             "of [a-z0-9]")

    def __repr__(self) -> str:
        return f"BootstrapToken(token_id={self.token_id!r}, secret=<hidden>)"

    @property
    def value(self) -> str:
        return f"{self.token_id}.{self.secret}"

    @classmethod
    def generate(cls, choose: Callable[[str], str]) -> "BootstrapToken":
        """A new token drawn with ``choose`` (pass ``secrets.choice``)."""
        def draw(length: int) -> str:
            return "".join(choose(_TOKEN_ALPHABET) for _ in range(length))
        return cls(draw(6), draw(16))


def bootstrap_token_secret(machine: str, token: BootstrapToken, expires_at: datetime) -> Manifest:
    """The Secret that makes ``token`` valid for kubelet TLS bootstrap until ``expires_at``; the
    API server's token cleaner deletes it once expired, and deleting it revokes the token."""
    check_machine_name(machine)
    data = {
        "description": f"gpu-tenant-portal: joins machine {machine} to this cluster",
        "token-id": token.token_id,
        "token-secret": token.secret,
        "expiration": rfc3339(expires_at),
        "usage-bootstrap-authentication": "true",
        "auth-extra-groups": BOOTSTRAP_GROUP,
    }
    return _secret(bootstrap_token_secret_name(token.token_id), BOOTSTRAP_TOKEN_NAMESPACE,
                   machine_labels(machine), data, BOOTSTRAP_TOKEN_TYPE)


def rfc3339(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("a bootstrap token expiration needs a timezone")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def bootstrap_role_bindings() -> list[Manifest]:
    """What the bootstrap group may do: request a client certificate (CSR), and have it
    approved by the controller manager, as kubeadm grants its own bootstrappers."""
    roles = {
        "gpu-tenant-portal:node-bootstrapper": "system:node-bootstrapper",
        "gpu-tenant-portal:node-autoapprove-bootstrap":
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
    }
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": lbl.managed()},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                          "name": BOOTSTRAP_GROUP}],
        }
        for name, role in roles.items()
    ]


# ----- user data


def bootstrap_kubeconfig(*, server: str, ca_data: str, token: str) -> Manifest:
    """The kubeconfig a kubelet bootstraps with: the host API server, its CA (base64 PEM, as in
    certificate-authority-data) and the bootstrap token."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "host",
                      "cluster": {"server": server, "certificate-authority-data": ca_data}}],
        "users": [{"name": "kubelet-bootstrap", "user": {"token": token}}],
        "contexts": [{"name": "bootstrap",
                      "context": {"cluster": "host", "user": "kubelet-bootstrap"}}],
        "current-context": "bootstrap",
    }


def kubelet_extra_args(machine: str, node_name: str, extra: Sequence[str] = ()) -> str:
    return " ".join((f"--provider-id={provider_id(machine)}",
                     f"--hostname-override={node_name}", *extra))


def cloud_config(machine: str, *, server: str, ca_data: str, token: str, node_name: str,
                 extra_kubelet_args: Sequence[str] = ()) -> str:
    """The ``#cloud-config`` document that makes the provisioned machine join the host
    cluster as ``node_name``."""
    document = {
        "write_files": [
            {"path": BOOTSTRAP_KUBECONFIG_PATH, "owner": "root:root", "permissions": "0600",
             "content": _dump(bootstrap_kubeconfig(server=server, ca_data=ca_data,
                                                   token=token))},
            {"path": KUBELET_DEFAULTS_PATH, "owner": "root:root", "permissions": "0644",
             "content": "KUBELET_EXTRA_ARGS="
                        f"{kubelet_extra_args(machine, node_name, extra_kubelet_args)}\n"},
        ],
        "runcmd": [["systemctl", "enable", "--now", "kubelet"]],
    }
    return "#cloud-config\n" + _dump(document)


def user_data_secret(
    machine: str, *, server: str, ca_data: str, token: str, node_name: str,
    extra_kubelet_args: Sequence[str] = (),
) -> Manifest:
    """The Secret the BareMetalHost's spec.userData names, read by the operator under
    ``userData``. It holds the bootstrap token: never log it."""
    check_machine_name(machine)
    if not is_dns_label(node_name):
        raise ValueError(f"node name is not a DNS-1123 label: {node_name!r}")
    text = cloud_config(machine, server=server, ca_data=ca_data, token=token,
                        node_name=node_name, extra_kubelet_args=extra_kubelet_args)
    labels = {**machine_labels(machine), **METAL3_SECRET_LABEL}
    return _secret(user_data_secret_name(machine), MACHINES_NAMESPACE, labels,
                   {USER_DATA_KEY: text})


class _BlockDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_BlockDumper.add_representer(str, _represent_str)


def _dump(data: Any) -> str:
    # Block scalars keep embedded files readable on the machine; key order as written.
    return yaml.dump(data, Dumper=_BlockDumper, sort_keys=False, default_flow_style=False,
                     width=4096)


# ----- BareMetalHost


@dataclass(frozen=True)
class MachineImage:
    """The OS image to write to the machine's disk (spec.image)."""

    url: str
    checksum: str
    checksum_type: str = "sha256"
    format: str = "qcow2"

    def spec(self) -> Manifest:
        """spec.image, refusing what the operator's schema, webhook or Ironic would."""
        if not urlsplit(self.url).scheme or not urlsplit(self.url).path:
            raise ValueError(f"image URL must be absolute: {self.url!r}")
        if self.checksum_type not in CHECKSUM_TYPES:
            raise ValueError(f"checksum type must be one of {', '.join(CHECKSUM_TYPES)}")
        if self.format not in DISK_FORMATS:
            raise ValueError(f"image format must be one of {', '.join(DISK_FORMATS)}")
        if not self.checksum and self.format != "live-iso":
            raise ValueError("an image needs a checksum (only live-iso goes without)")
        return {"url": self.url, "checksum": self.checksum, "checksumType": self.checksum_type,
                "format": self.format}


def baremetal_host(
    machine: str,
    *,
    bmc_address: str,
    boot_mac: str,
    online: bool,
    image: MachineImage | None,
    user_data: str | None,
    disable_certificate_verification: bool = False,
) -> Manifest:
    """The machine's BareMetalHost. With ``image`` it is provisioned (``user_data`` names the
    user-data Secret); without, the operator deprovisions it, cleans it and keeps it available.

    The operator's webhook refuses changing ``boot_mac`` once set, and ``bmc_address`` unless
    the host is still registering or detached.
    """
    check_machine_name(machine)
    if not _MAC.fullmatch(boot_mac):
        raise ValueError(f"boot MAC address must be six colon-separated hex pairs: {boot_mac!r}")
    if user_data is not None and image is None:
        raise ValueError("user data goes with an image: a host without one boots nothing")
    bmc: Manifest = {"address": bmc_address, "credentialsName": bmc_secret_name(machine)}
    if disable_certificate_verification:
        bmc["disableCertificateVerification"] = True
    spec: Manifest = {
        "online": online,
        "bootMACAddress": boot_mac.lower(),
        "bmc": bmc,
        "automatedCleaningMode": "metadata",
    }
    if image is not None:
        spec["image"] = image.spec()
    if user_data is not None:
        spec["userData"] = {"name": user_data, "namespace": MACHINES_NAMESPACE}
    return {
        "apiVersion": METAL3_API_VERSION,
        "kind": BAREMETAL_HOST,
        "metadata": {"name": machine, "namespace": MACHINES_NAMESPACE,
                     "labels": machine_labels(machine)},
        "spec": spec,
    }


# ----- what the operator reports


@dataclass(frozen=True)
class HostObservation:
    """A BareMetalHost as the operator last reported it; ``exists`` is False when there is none.

    The operator keeps no observedGeneration. What tells that its status answers the current
    spec is the image: it copies spec.image into status.provisioning.image when provisioning
    completes, and clears it when deprovisioning completes; like the operator itself (which
    re-provisions only on a new URL), only the URL counts.
    """

    exists: bool
    state: str = ProvisioningState.NONE
    operational_status: str = ""
    error_type: str = ""
    error_message: str = ""
    error_count: int = 0
    powered_on: bool = False
    online: bool = False
    wanted_image_url: str = ""
    provisioned_image_url: str = ""

    @property
    def has_error(self) -> bool:
        return self.operational_status == OPERATIONAL_ERROR or bool(self.error_type)

    @property
    def image_settled(self) -> bool:
        """The operator's status reflects spec.image: the wanted image is the one on disk, or
        none is wanted and none is left."""
        return self.wanted_image_url == self.provisioned_image_url

    @property
    def is_available(self) -> bool:
        return self.state in (ProvisioningState.AVAILABLE, ProvisioningState.READY)

    @property
    def provisioned(self) -> bool:
        """The wanted image is written and the host reported provisioned."""
        return (self.state == ProvisioningState.PROVISIONED and bool(self.wanted_image_url)
                and self.image_settled)

    @property
    def in_pool(self) -> bool:
        """Deprovisioned and cleaned (or never provisioned), with no image wanted."""
        return self.is_available and not self.wanted_image_url and self.image_settled


def host_observation(bmh: Manifest | None) -> HostObservation:
    if bmh is None:
        return HostObservation(exists=False)
    spec = bmh.get("spec") or {}
    status = bmh.get("status") or {}
    provisioning = status.get("provisioning") or {}
    return HostObservation(
        exists=True,
        state=str(provisioning.get("state") or ""),
        operational_status=str(status.get("operationalStatus") or ""),
        error_type=str(status.get("errorType") or ""),
        error_message=str(status.get("errorMessage") or ""),
        error_count=int(status.get("errorCount") or 0),
        powered_on=bool(status.get("poweredOn")),
        online=bool(spec.get("online")),
        wanted_image_url=_image_url(spec.get("image")),
        provisioned_image_url=_image_url(provisioning.get("image")),
    )


def _image_url(image: Any) -> str:
    return str(image.get("url") or "") if isinstance(image, Mapping) else ""
