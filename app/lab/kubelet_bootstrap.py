"""A lab machine joining a virtual cluster as a kubelet does: TLS bootstrap, then its Node.

When a provisioned machine's user data names a virtual cluster's endpoint
(``https://<cluster>.<tenant>.vc.lab``, a private-nodes cluster of issue 57), the lab plays the
kubelet's real TLS bootstrap against that cluster's API server, through the lab's CONNECT proxy:
a new key and a CSR (CN ``system:node:<name>``, O ``system:nodes``, signer
``kubernetes.io/kube-apiserver-client-kubelet``) posted with the bootstrap token; it waits,
bounded, for someone (the portal) to approve it and the controller-manager to sign it; then it
registers the Node and its status with the issued certificate, so the virtual API server's Node
authorizer and NodeRestriction judge it as they would a real kubelet. kwok (one per such cluster,
``VirtualKwoks``) then keeps the Node Ready and runs its pods.
"""

from __future__ import annotations

import base64
import logging
import os
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from app.kube.port import Manifest
from app.lab.ports import free_port
from app.lab.processes import terminate_all

log = logging.getLogger(__name__)

VIRTUAL_DOMAIN: Final = ".vc.lab"
KUBELET_SIGNER: Final = "kubernetes.io/kube-apiserver-client-kubelet"
NODES_GROUP: Final = "system:nodes"
CSR_PATH: Final = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
# What a machine's kubelet would wait for its certificate: the portal approves on its next pass.
CERTIFICATE_WAIT_SECONDS: Final = 120.0
REQUEST_SECONDS: Final = 10.0
# A kubelet's own labels; CoreDNS (and most charts) select kubernetes.io/os=linux.
KUBELET_LABELS: Final = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}


class JoinError(RuntimeError):
    """The machine could not join its virtual cluster (this boot; the next step tries again)."""


def is_virtual_endpoint(server: str) -> bool:
    host = urlsplit(server).hostname or ""
    return host.endswith(VIRTUAL_DOMAIN)


@dataclass(frozen=True)
class BootstrapKubeconfig:
    """The bootstrap kubeconfig the user data writes: server, its CA, the token."""

    server: str
    ca_pem: bytes
    token: str

    def __repr__(self) -> str:
        return f"BootstrapKubeconfig(server={self.server!r}, token=<hidden>)"


def read_bootstrap_kubeconfig(text: str) -> BootstrapKubeconfig:
    try:
        config = yaml.safe_load(text)
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        return BootstrapKubeconfig(str(cluster["server"]),
                                   base64.b64decode(cluster["certificate-authority-data"]),
                                   str(user["token"]))
    except (yaml.YAMLError, KeyError, IndexError, TypeError, ValueError):
        raise JoinError("the bootstrap kubeconfig has no server, CA data and token") from None


@dataclass(frozen=True)
class NodeCredentials:
    """The kubelet's client key and certificate, once issued."""

    key_pem: bytes
    cert_pem: bytes
    csr_name: str

    def __repr__(self) -> str:
        return f"NodeCredentials(csr_name={self.csr_name!r}, key=<hidden>)"


def node_key_and_csr(node_name: str) -> tuple[bytes, bytes]:
    """A new P-256 key and a CSR for ``system:node:<node_name>`` in ``system:nodes``."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, NODES_GROUP),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}")])
    request = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(
        key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return key_pem, request.public_bytes(serialization.Encoding.PEM)


def csr_manifest(csr_pem: bytes) -> Manifest:
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"generateName": "node-csr-"},
            "spec": {"request": base64.b64encode(csr_pem).decode(),
                     "signerName": KUBELET_SIGNER,
                     "usages": ["digital signature", "client auth"]}}


def issued_certificate(csr: Mapping[str, Any]) -> bytes | None:
    """The certificate once signed; JoinError when the CSR was denied or failed."""
    status = csr.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") in ("Denied", "Failed") and condition.get("status") == "True":
            raise JoinError(f"CSR {csr['metadata']['name']} {condition['type'].lower()}: "
                            f"{condition.get('message') or condition.get('reason') or ''}")
    certificate = status.get("certificate")
    return base64.b64decode(certificate) if certificate else None


@dataclass
class VirtualKubelet:
    """The kubelet of one machine, against one virtual cluster, through ``proxy``."""

    bootstrap: BootstrapKubeconfig
    proxy: str | None
    certificate_wait: float = CERTIFICATE_WAIT_SECONDS
    poll: float = 0.5
    transport: httpx.BaseTransport | None = None  # tests: an httpx.MockTransport
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def request_certificate(self, node_name: str) -> tuple[bytes, str]:
        """A new key, and the name of the CSR posted for it with the bootstrap token."""
        key_pem, csr_pem = node_key_and_csr(node_name)
        with self.client(token=self.bootstrap.token) as client:
            made = _checked(client.post(CSR_PATH, json=csr_manifest(csr_pem)), "create its CSR")
        return key_pem, str(made["metadata"]["name"])

    def certificate(self, csr_name: str) -> bytes | None:
        """The CSR's certificate once issued (read with the bootstrap token, as kubelets do)."""
        with self.client(token=self.bootstrap.token) as client:
            return issued_certificate(
                _checked(client.get(f"{CSR_PATH}/{csr_name}"), f"read CSR {csr_name}"))

    def tls_bootstrap(self, node_name: str) -> NodeCredentials:
        """Both, waiting (bounded by ``certificate_wait``) for the approval and the signature."""
        key_pem, name = self.request_certificate(node_name)
        deadline = self.clock() + self.certificate_wait
        while True:
            certificate = self.certificate(name)
            if certificate is not None:
                return NodeCredentials(key_pem, certificate, name)
            if self.clock() >= deadline:
                raise JoinError(f"CSR {name} not approved and signed within "
                                f"{self.certificate_wait:.0f}s")
            self.sleep(self.poll)

    def register(self, node: Manifest, credentials: NodeCredentials) -> None:
        """Create the Node (or find it, after a crash) and patch its status, as the node."""
        name = node["metadata"]["name"]
        with self.client(credentials=credentials) as client:
            body = {k: v for k, v in node.items() if k != "status"}
            created = client.post("/api/v1/nodes", json=body)
            if created.status_code != 409:
                _checked(created, f"register Node {name}")
            _checked(client.patch(f"/api/v1/nodes/{name}/status",
                                  json={"status": node.get("status") or {}},
                                  headers={"Content-Type": "application/merge-patch+json"}),
                     f"report the status of Node {name}")

    def client(self, *, token: str | None = None,
                credentials: NodeCredentials | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if self.transport is not None:
            return httpx.Client(base_url=self.bootstrap.server, headers=headers,
                                 transport=self.transport, timeout=REQUEST_SECONDS)
        context = ssl.create_default_context(cadata=self.bootstrap.ca_pem.decode())
        if credentials is not None:
            _load_client_certificate(context, credentials)
        return httpx.Client(base_url=self.bootstrap.server, headers=headers, verify=context,
                            proxy=self.proxy, timeout=REQUEST_SECONDS, trust_env=False)


def _load_client_certificate(context: ssl.SSLContext, credentials: NodeCredentials) -> None:
    # ssl loads a client certificate from files only: private ones, gone right after.
    with tempfile.TemporaryDirectory(prefix="lab-kubelet-") as folder:
        cert, key = Path(folder) / "kubelet.crt", Path(folder) / "kubelet.key"
        for path, data in ((cert, credentials.cert_pem), (key, credentials.key_pem)):
            path.touch(mode=0o600)
            path.write_bytes(data)
        context.load_cert_chain(cert, key)


def _checked(answer: httpx.Response, what: str) -> dict[str, Any]:
    if answer.status_code >= 300:
        reason = ""
        try:
            reason = str(answer.json().get("message") or "")
        except ValueError:
            reason = answer.text[:200]
        raise JoinError(f"could not {what}: HTTP {answer.status_code} {reason}".rstrip())
    document: dict[str, Any] = answer.json()
    return document


def kwok_argv(program: Path, kubeconfig: Path, port: int) -> list[str]:
    """kwok keeping the lab's machine Nodes of one virtual cluster Ready (their leases in its
    kube-node-lease) and running the pods its scheduler binds to them."""
    return [str(program), f"--kubeconfig={kubeconfig}",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--server-address=127.0.0.1:{port}", "--node-lease-duration-seconds=40"]


@dataclass
class VirtualKwoks:
    """One kwok per virtual cluster that has lab machines, on its admin kubeconfig, reaching it
    through the lab's proxy; restarted if it exits, stopped with the lab or the cluster."""

    program: Path
    workdir: Path
    proxy: str | None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def ensure(self, server: str, admin_kubeconfig: str) -> None:
        running = self.processes.get(server)
        if running is not None and running.poll() is None:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        kubeconfig = self._kubeconfig(server)
        kubeconfig.touch(mode=0o600)
        kubeconfig.write_text(admin_kubeconfig)
        self._start(server, kubeconfig)

    def _kubeconfig(self, server: str) -> Path:
        return self.workdir / f"{urlsplit(server).hostname or 'cluster'}.kubeconfig"

    def _start(self, server: str, kubeconfig: Path) -> None:
        env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost"}
        if self.proxy:
            env["HTTPS_PROXY"] = self.proxy
        log_path = kubeconfig.with_suffix(".kwok.log")
        with log_path.open("ab") as out:
            self.processes[server] = subprocess.Popen(
                kwok_argv(self.program, kubeconfig, free_port()), stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True)
        log.info("kwok started for the machines of %s", server)

    def keep(self, servers: set[str]) -> None:
        """kwok again for a cluster whose kwok exited; none for a cluster without machines."""
        for server in set(self.processes) - servers:
            self.forget(server)
        for server, process in list(self.processes.items()):
            if process.poll() is not None:
                log.warning("kwok for %s exited (%s); starting it again", server,
                            process.returncode)
                self._start(server, self._kubeconfig(server))

    def forget(self, server: str) -> None:
        process = self.processes.pop(server, None)
        if process is not None:
            terminate_all([process], timeout=10.0)

    def stop(self) -> None:
        terminate_all(list(self.processes.values()), timeout=10.0)
        self.processes.clear()


def kubeconfig_server(text: str) -> str:
    try:
        return str(yaml.safe_load(text)["clusters"][0]["cluster"]["server"])
    except (yaml.YAMLError, KeyError, IndexError, TypeError):
        return ""


def delete_node(admin_kubeconfig: str, node_name: str, proxy: str | None,
                transport: httpx.BaseTransport | None = None) -> None:
    """Delete the Node from the virtual cluster with its admin kubeconfig (gone already: fine)."""
    config = yaml.safe_load(admin_kubeconfig)
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    credentials = None
    if user.get("client-certificate-data"):
        credentials = NodeCredentials(base64.b64decode(user["client-key-data"]),
                                      base64.b64decode(user["client-certificate-data"]), "")
    bootstrap = BootstrapKubeconfig(str(cluster["server"]),
                                    base64.b64decode(cluster["certificate-authority-data"]),
                                    str(user.get("token") or ""))
    kubelet = VirtualKubelet(bootstrap, proxy, transport=transport)
    with kubelet.client(token=bootstrap.token or None, credentials=credentials) as client:
        answer = client.delete(f"/api/v1/nodes/{node_name}")
        if answer.status_code != 404:
            _checked(answer, f"delete Node {node_name}")
