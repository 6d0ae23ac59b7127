"""A real Kubernetes control plane: etcd + kube-apiserver (+ controller-manager, kube-scheduler).

The binaries are those ``make tools`` builds into ``.cache/bin`` (etcd is Debian's, linked
there). Every server gets ports of its own, a PKI made for it and its own data directory;
``stop()`` ends the processes and keeps nothing. The test suite starts one per test module;
``portal lab`` starts one as the GPU host, bound to the lab network's address so that the
virtual clusters' syncers reach it from their own network namespaces.
"""

from __future__ import annotations

import base64
import shutil
import signal
import ssl
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from app.kube.adapter import KubernetesAdapter
from app.kube.port import KubePort, register_kind
from app.kube.retry import RetryPolicy
from app.lab.pki import CertificateAuthority, KeyPair, rsa_key_pair
from app.lab.ports import free_port

ADMISSION_PLUGINS = ",".join([
    "NamespaceLifecycle", "LimitRanger", "ServiceAccount", "ResourceQuota", "PodSecurity",
    "MutatingAdmissionWebhook", "ValidatingAdmissionWebhook", "ValidatingAdmissionPolicy",
])
SA_ISSUER = "https://kubernetes.default.svc"


def kubeconfig_yaml(server: str, ca_pem: bytes, *, name: str = "test",
                    client: KeyPair | None = None, token: str | None = None) -> str:
    user: dict[str, str] = {}
    if client is not None:
        user["client-certificate-data"] = base64.b64encode(client.cert_pem).decode()
        user["client-key-data"] = base64.b64encode(client.key_pem).decode()
    if token is not None:
        user["token"] = token
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    })


def fast_adapter(kubeconfig: str) -> KubernetesAdapter:
    """The portal's adapter without a client-side rate limit, retrying briefly."""
    return KubernetesAdapter.from_kubeconfig_yaml(
        kubeconfig, qps=1000.0, burst=1000, retry=RetryPolicy(attempts=3, base_delay=0.2))


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    args: list[str] = field(default_factory=list)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


@dataclass
class ApiServer:
    """One control plane. ``start()`` blocks until ``/readyz`` (and the controllers) answer."""

    assets: Path
    workdir: Path
    name: str = "host"
    controllers: bool = False
    scheduler: bool = False
    # The address kube-apiserver listens on (and its certificate names); loopback unless the
    # clients live in other network namespaces.
    address: str = "127.0.0.1"
    ca: CertificateAuthority = field(default_factory=CertificateAuthority)
    port: int = 0
    _processes: list[_Process] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.port = self.port or free_port(self.address)

    @property
    def url(self) -> str:
        return f"https://{self.address}:{self.port}"

    @property
    def admin_kubeconfig(self) -> str:
        return self.kubeconfig_for(client=self.ca.client("kubernetes-admin", "system:masters"))

    def kubeconfig_for(self, *, client: KeyPair | None = None, token: str | None = None) -> str:
        return kubeconfig_yaml(self.url, self.ca.cert_pem, name=self.name, client=client,
                               token=token)

    def write_admin_kubeconfig(self, path: Path) -> Path:
        path.write_text(self.admin_kubeconfig)
        path.chmod(0o600)
        return path

    def adapter(self) -> KubernetesAdapter:
        return fast_adapter(self.admin_kubeconfig)

    def start(self) -> ApiServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            files = self._write_pki()
            etcd_port = self._start_etcd()
            self._start_apiserver(files, etcd_port)
            self._wait(self._answers("/readyz"), "kube-apiserver /readyz")
            if self.controllers:
                self._start_controller_manager(files)
            if self.scheduler:
                self._start_scheduler(files)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def is_running(self) -> bool:
        return bool(self._processes) and all(p.popen.poll() is None for p in self._processes)

    def stop_apiserver(self) -> None:
        """Only kube-apiserver goes (etcd keeps the data): the host stops answering."""
        self._process("kube-apiserver").stop()

    def restart_apiserver(self) -> None:
        """kube-apiserver again, on the same port and etcd; blocks until ``/readyz``."""
        stopped = self._process("kube-apiserver")
        self._processes.remove(stopped)
        self._spawn("kube-apiserver", stopped.args)
        self._wait(self._answers("/readyz"), "kube-apiserver /readyz after a restart")

    def _process(self, binary: str) -> _Process:
        return next(p for p in self._processes if p.name == binary)

    # ----- the pieces

    def _write_pki(self) -> dict[str, Path]:
        pki = self.workdir / "pki"
        pki.mkdir(exist_ok=True)
        serving = self.ca.serving(self.address, "127.0.0.1", "localhost",
                                  "kubernetes.default.svc")
        sa_private, sa_public = rsa_key_pair()
        manager = self.ca.client("system:kube-controller-manager")
        scheduler = self.ca.client("system:kube-scheduler")
        contents = {
            "ca.crt": self.ca.cert_pem, "ca.key": self.ca.key_pem,
            "serving.crt": serving.cert_pem, "serving.key": serving.key_pem,
            "sa.key": sa_private, "sa.pub": sa_public,
            "controller-manager.kubeconfig": self.kubeconfig_for(client=manager).encode(),
            "scheduler.kubeconfig": self.kubeconfig_for(client=scheduler).encode(),
        }
        files = {}
        for name, data in contents.items():
            path = pki / name
            path.write_bytes(data)
            path.chmod(0o600)
            files[name] = path
        return files

    def _start_etcd(self) -> int:
        client, peer = free_port(), free_port()
        url = f"http://127.0.0.1:{client}"
        self._spawn("etcd", [
            f"--name={self.name}", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster={self.name}=http://127.0.0.1:{peer}",
        ])
        self._wait(lambda: _etcd_healthy(url), "etcd /health")
        return client

    def _start_apiserver(self, files: dict[str, Path], etcd_port: int) -> None:
        self._spawn("kube-apiserver", [
            f"--bind-address={self.address}", f"--secure-port={self.port}",
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--service-cluster-ip-range=10.96.0.0/16", "--endpoint-reconciler-type=none",
            "--authorization-mode=RBAC", f"--client-ca-file={files['ca.crt']}",
            f"--tls-cert-file={files['serving.crt']}",
            f"--tls-private-key-file={files['serving.key']}",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={files['sa.pub']}",
            f"--service-account-signing-key-file={files['sa.key']}",
            f"--api-audiences={SA_ISSUER}",
            f"--enable-admission-plugins={ADMISSION_PLUGINS}",
            # As kubeadm runs it: a machine joins with a bootstrap token (a Secret of
            # kube-system), which the API server refuses once expired.
            "--enable-bootstrap-token-auth",
            # Beta and off by default in 1.30-1.32: on, so that hostUsers: false is kept
            # (cluster templates with user namespaces; see tests/webhook).
            "--feature-gates=UserNamespacesSupport=true",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
        ])

    def _start_controller_manager(self, files: dict[str, Path]) -> None:
        port = free_port()
        kubeconfig = files["controller-manager.kubeconfig"]
        self._spawn("kube-controller-manager", [
            f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false", "--use-service-account-credentials=true",
            # tokencleaner (off by default, on in kubeadm's clusters) deletes expired bootstrap
            # tokens.
            "--controllers=*,tokencleaner",
            f"--service-account-private-key-file={files['sa.key']}",
            f"--root-ca-file={files['ca.crt']}",
            f"--cluster-signing-cert-file={files['ca.crt']}",
            f"--cluster-signing-key-file={files['ca.key']}",
            "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--cert-dir={self.workdir / 'controller-manager-certs'}",
        ])
        self._wait(lambda: _answers_ok(f"https://127.0.0.1:{port}/healthz", None),
                   "kube-controller-manager /healthz")
        # Healthy is not yet working: the aggregated built-in roles show the controllers run.
        self._wait(self._view_role_aggregated, "the controllers to aggregate ClusterRole view")

    def _start_scheduler(self, files: dict[str, Path]) -> None:
        port = free_port()
        kubeconfig = files["scheduler.kubeconfig"]
        self._spawn("kube-scheduler", [
            f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}", "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={port}",
        ])
        self._wait(lambda: _answers_ok(f"https://127.0.0.1:{port}/healthz", None),
                   "kube-scheduler /healthz")

    def _view_role_aggregated(self) -> bool:
        adapter = self.adapter()
        try:
            view = adapter.get("rbac.authorization.k8s.io/v1", "ClusterRole", "view")
        finally:
            adapter.close()
        return bool((view or {}).get("rules"))

    def _spawn(self, binary: str, args: list[str]) -> None:
        log = self.workdir / f"{binary}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                [str(self.assets / binary), *args], stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)
        self._processes.append(_Process(binary, popen, log, args))

    def _answers(self, path: str) -> Callable[[], bool]:
        context = self._client_context()
        return lambda: _answers_ok(self.url + path, context)

    def _client_context(self) -> ssl.SSLContext:
        admin = self.ca.client("kubernetes-admin", "system:masters")
        pki = self.workdir / "pki"
        (pki / "probe.crt").write_bytes(admin.cert_pem)
        (pki / "probe.key").write_bytes(admin.key_pem)
        context = ssl.create_default_context(cadata=self.ca.cert_pem.decode())
        context.load_cert_chain(pki / "probe.crt", pki / "probe.key")
        return context

    def _wait(self, check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in self._processes:
                if process.popen.poll() is not None:
                    raise RuntimeError(f"{process.name} exited while waiting for {what}:\n"
                                       f"{process.tail()}")
            if check():
                return
            time.sleep(0.2)
        logs = "\n".join(f"--- {p.name}\n{p.tail()}" for p in self._processes)
        raise RuntimeError(f"{what} did not answer within {timeout:.0f}s\n{logs}")


def _etcd_healthy(url: str) -> bool:
    try:
        return '"health":"true"' in httpx.get(f"{url}/health", timeout=1.0).text
    except httpx.HTTPError:
        return False


def _answers_ok(url: str, context: ssl.SSLContext | None) -> bool:
    verify: Any = context if context is not None else False
    try:
        response = httpx.get(url, verify=verify, timeout=2.0)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


CRD_API_VERSION = "apiextensions.k8s.io/v1"
register_kind(CRD_API_VERSION, "CustomResourceDefinition", "customresourcedefinitions",
              namespaced=False)


def install_crds(port: KubePort, path: Path, timeout: float = 30.0) -> None:
    """Apply the CRDs in a YAML file and wait until the API server serves their kinds."""
    names = []
    for crd in yaml.safe_load_all(path.read_text()):
        if crd:
            port.apply(crd, force=True)
            names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + timeout
    while not all(_established(port.get(CRD_API_VERSION, "CustomResourceDefinition", name))
                  for name in names):
        if time.monotonic() > deadline:
            raise RuntimeError(f"CRDs {names} not established within {timeout:.0f}s")
        time.sleep(0.2)


def _established(crd: dict[str, Any] | None) -> bool:
    conditions = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)
