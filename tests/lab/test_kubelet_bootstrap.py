"""The lab's kubelet joining a virtual cluster (issue 57), without a lab: the CSR it makes, the
bootstrap it plays against a stand-in API server (httpx.MockTransport), and how the machine
play tells a virtual cluster's machine from a host's. On the real programs: the experiments of
issue 57 (E2-E5), and the lab test once the portal's private-nodes side lands."""

from __future__ import annotations

import base64
import itertools
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from app.kube.memory import InMemoryKube
from app.lab.kubelet_bootstrap import (
    KUBELET_SIGNER,
    BootstrapKubeconfig,
    JoinError,
    NodeCredentials,
    VirtualKubelet,
    VirtualKwoks,
    csr_manifest,
    delete_node,
    is_virtual_endpoint,
    issued_certificate,
    kwok_argv,
    node_key_and_csr,
    read_bootstrap_kubeconfig,
)
from app.lab.machines import (
    BOOTSTRAP_KUBECONFIG,
    KUBELET_DEFAULTS,
    LAB_HARDWARE,
    MACHINES_NAMESPACE,
    MachineBoots,
    boot_config,
    private_machine_node,
)
from app.lab.metal3 import METAL3_API

SERVER = "https://train.acme.vc.lab"
TOKEN = "abc123.0123456789abcdef"
CERT = b"-----BEGIN CERTIFICATE-----\nissued\n-----END CERTIFICATE-----\n"


def bootstrap() -> BootstrapKubeconfig:
    return BootstrapKubeconfig(SERVER, b"ca", TOKEN)


def test_only_virtual_cluster_endpoints_are_joined_as_private_nodes() -> None:
    assert is_virtual_endpoint("https://train.acme.vc.lab")
    assert is_virtual_endpoint("https://train.acme.vc.lab:443")
    assert not is_virtual_endpoint("https://10.213.0.1:6443")
    assert not is_virtual_endpoint("https://vc.lab.example.com")


def test_the_csr_names_the_node_in_the_nodes_group() -> None:
    key_pem, csr_pem = node_key_and_csr("gpu-07")
    request = x509.load_pem_x509_csr(csr_pem)
    assert request.is_signature_valid
    assert request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        "system:node:gpu-07")
    assert request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == (
        "system:nodes")
    assert b"PRIVATE KEY" in key_pem
    manifest = csr_manifest(csr_pem)
    assert manifest["spec"]["signerName"] == KUBELET_SIGNER == (
        "kubernetes.io/kube-apiserver-client-kubelet")
    assert manifest["spec"]["usages"] == ["digital signature", "client auth"]
    assert base64.b64decode(manifest["spec"]["request"]) == csr_pem


def test_a_denied_csr_ends_the_wait() -> None:
    denied = {"metadata": {"name": "node-csr-x"}, "status": {"conditions": [
        {"type": "Denied", "status": "True", "message": "not this machine's token"}]}}
    with pytest.raises(JoinError, match="denied: not this machine's token"):
        issued_certificate(denied)
    assert issued_certificate({"metadata": {"name": "n"}, "status": {}}) is None


class StandIn:
    """An API server that approves the CSR after ``pending`` reads."""

    def __init__(self, pending: int = 2) -> None:
        self.pending = pending
        self.requests: list[httpx.Request] = []
        self.nodes: dict[str, Any] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        if request.method == "POST" and path.endswith("/certificatesigningrequests"):
            return httpx.Response(201, json={"metadata": {"name": "node-csr-abc"}})
        if request.method == "GET" and path.endswith("/node-csr-abc"):
            self.pending -= 1
            status = {"certificate": base64.b64encode(CERT).decode()} if self.pending < 0 else {}
            return httpx.Response(200, json={"metadata": {"name": "node-csr-abc"},
                                             "status": status})
        if request.method == "POST" and path == "/api/v1/nodes":
            body = json.loads(request.content)
            name = body["metadata"]["name"]
            if name in self.nodes:
                return httpx.Response(409, json={"message": "exists"})
            self.nodes[name] = body
            return httpx.Response(201, json=body)
        if request.method == "PATCH" and path.endswith("/status"):
            return httpx.Response(200, json={})
        if request.method == "DELETE":
            return httpx.Response(404 if path.rsplit("/", 1)[1] not in self.nodes else 200,
                                  json={})
        return httpx.Response(418, json={"message": f"unexpected {request.method} {path}"})


def kubelet(server: StandIn, wait: float = 60.0) -> VirtualKubelet:
    ticks = itertools.count()
    return VirtualKubelet(bootstrap(), None, certificate_wait=wait, poll=1.0,
                          transport=httpx.MockTransport(server), sleep=lambda _: None,
                          clock=lambda: float(next(ticks)))


def test_the_bootstrap_posts_a_csr_with_the_token_and_waits_for_its_certificate() -> None:
    server = StandIn(pending=2)
    credentials = kubelet(server).tls_bootstrap("gpu-07")
    assert credentials.cert_pem == CERT
    assert credentials.csr_name == "node-csr-abc"
    posted = server.requests[0]
    assert posted.headers["Authorization"] == f"Bearer {TOKEN}"
    body = json.loads(posted.content)
    assert body["kind"] == "CertificateSigningRequest"
    assert [r.method for r in server.requests] == ["POST", "GET", "GET", "GET"]
    assert "key=<hidden>" in repr(credentials)
    assert TOKEN not in repr(bootstrap())


def test_the_wait_for_a_certificate_is_bounded() -> None:
    with pytest.raises(JoinError, match="not approved and signed within 5s"):
        kubelet(StandIn(pending=1000), wait=5.0).tls_bootstrap("gpu-07")


def test_the_node_is_registered_and_found_again_after_a_crash() -> None:
    server = StandIn()
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-07"},
            "status": {"capacity": {"nvidia.com/gpu": "4"}}}
    credentials = NodeCredentials(b"key", CERT, "node-csr-abc")
    kubelet(server).register(node, credentials)
    kubelet(server).register(node, credentials)  # 409: there already
    assert "status" not in server.nodes["gpu-07"]
    patches = [r for r in server.requests if r.method == "PATCH"]
    assert len(patches) == 2
    assert json.loads(patches[0].content) == {"status": {"capacity": {"nvidia.com/gpu": "4"}}}
    assert patches[0].headers["Content-Type"] == "application/merge-patch+json"
    assert "Authorization" not in patches[0].headers  # the certificate, not the token


def test_a_refused_registration_says_why() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, json={"message": 'node "a" is not allowed to modify node "b"'})
    refusing = VirtualKubelet(bootstrap(), None, transport=httpx.MockTransport(refuse))
    node = {"metadata": {"name": "b"}, "status": {}}
    with pytest.raises(JoinError, match=r"HTTP 403 node .a. is not allowed"):
        refusing.register(node, NodeCredentials(b"k", CERT, "c"))


def test_deleting_a_node_that_is_gone_is_fine() -> None:
    admin = yaml.safe_dump({"clusters": [{"cluster": {
        "server": SERVER, "certificate-authority-data": base64.b64encode(b"ca").decode()}}],
        "users": [{"user": {"token": "admin-token"}}]})
    delete_node(admin, "gpu-07", None, transport=httpx.MockTransport(StandIn()))


def test_the_bootstrap_kubeconfig_is_read_from_the_user_data() -> None:
    text = yaml.safe_dump({"clusters": [{"name": "host", "cluster": {
        "server": SERVER, "certificate-authority-data": base64.b64encode(b"PEM").decode()}}],
        "users": [{"name": "kubelet-bootstrap", "user": {"token": TOKEN}}]})
    assert read_bootstrap_kubeconfig(text) == BootstrapKubeconfig(SERVER, b"PEM", TOKEN)
    with pytest.raises(JoinError, match="no server, CA data and token"):
        read_bootstrap_kubeconfig("clusters: []")


def test_a_private_node_carries_the_kubelet_labels_and_its_node_labels() -> None:
    user_data = "#cloud-config\n" + yaml.safe_dump({"write_files": [
        {"path": BOOTSTRAP_KUBECONFIG, "content": "kubeconfig"},
        {"path": KUBELET_DEFAULTS, "content": "KUBELET_EXTRA_ARGS=--provider-id=metal3://"
         "portal-machines/gpu-07 --hostname-override=gpu-07 "
         "--node-labels=gpu-tenant-portal/cluster=12 --rotate-certificates\n"}]})
    config = boot_config(user_data)
    assert config.node_labels == {"gpu-tenant-portal/cluster": "12"}
    node = private_machine_node(config, LAB_HARDWARE["52:54:00:b1:00:01"])
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/os"] == "linux"  # CoreDNS selects it
    assert labels["kubernetes.io/arch"] == "amd64"
    assert labels["gpu-tenant-portal/cluster"] == "12"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L40S"
    assert node["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert node["spec"] == {"providerID": "metal3://portal-machines/gpu-07"}
    # Only what NodeRestriction lets a kubelet set on its own Node.
    assert not [k for k in labels if k.startswith("node-restriction.kubernetes.io/")]


def test_kwok_manages_only_the_lab_machines_of_the_cluster(tmp_path: Path) -> None:
    argv = kwok_argv(Path("/bin/kwok"), tmp_path / "vc.kubeconfig", 4321)
    assert argv == ["/bin/kwok", f"--kubeconfig={tmp_path / 'vc.kubeconfig'}",
                    "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                    "--server-address=127.0.0.1:4321", "--node-lease-duration-seconds=40"]


# --- the machine play, on a dict host and a stand-in virtual API server --------------------


def _host_with_provisioned_machine() -> InMemoryKube:
    host = InMemoryKube(namespaces=("default", "kube-system", MACHINES_NAMESPACE, "t-acme--train"))
    ca = base64.b64encode(b"ca").decode()
    user_data = "#cloud-config\n" + yaml.safe_dump({"write_files": [
        {"path": BOOTSTRAP_KUBECONFIG, "content": yaml.safe_dump({
            "clusters": [{"cluster": {"server": SERVER, "certificate-authority-data": ca}}],
            "users": [{"user": {"token": TOKEN}}]})},
        {"path": KUBELET_DEFAULTS, "content": "KUBELET_EXTRA_ARGS=--provider-id=metal3://"
         "portal-machines/gpu-07 --hostname-override=gpu-07\n"}]})
    host.seed({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "gpu-07-user-data", "namespace": MACHINES_NAMESPACE},
               "data": {"userData": base64.b64encode(user_data.encode()).decode()}})
    admin = yaml.safe_dump({"clusters": [{"cluster": {"server": SERVER,
                                                      "certificate-authority-data": ca}}],
                            "users": [{"user": {"token": "admin"}}]})
    host.seed({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "vc-train", "namespace": "t-acme--train"},
               "data": {"config": base64.b64encode(admin.encode()).decode()}})
    host.seed({"apiVersion": METAL3_API, "kind": "BareMetalHost",
               "metadata": {"name": "gpu-07", "namespace": MACHINES_NAMESPACE},
               "spec": {"bootMACAddress": "52:54:00:b1:00:01",
                        "userData": {"name": "gpu-07-user-data"}},
               "status": {"provisioning": {"state": "provisioned"}}})
    return host


def test_the_play_joins_a_virtual_clusters_machine_once_approved_and_removes_it_after() -> None:
    host = _host_with_provisioned_machine()
    server = StandIn(pending=1)
    boots = MachineBoots(host, transport=httpx.MockTransport(server))
    boots.step()  # the CSR posted
    assert list(boots.pending) == ["metal3://portal-machines/gpu-07"]
    boots.step()  # not yet approved: waits, posts no other CSR
    boots.step()  # approved and signed: the Node registered
    assert [r.method for r in server.requests] == ["POST", "GET", "GET", "POST", "PATCH"]
    assert boots.private["metal3://portal-machines/gpu-07"].node_name == "gpu-07"
    assert server.nodes["gpu-07"]["metadata"]["labels"]["kubernetes.io/os"] == "linux"
    assert host.list("v1", "Node") == []  # never on the host
    boots.step()  # joined: nothing more
    assert len(server.requests) == 5
    host.delete(METAL3_API, "BareMetalHost", "gpu-07", MACHINES_NAMESPACE)
    boots.step()  # deprovisioned: its Node deleted in the virtual cluster
    assert server.requests[-1].method == "DELETE"
    assert server.requests[-1].url.path == "/api/v1/nodes/gpu-07"
    assert boots.private == {}


def test_no_csr_for_a_cluster_the_lab_has_no_admin_kubeconfig_of() -> None:
    host = _host_with_provisioned_machine()
    host.delete("v1", "Secret", "vc-train", "t-acme--train")
    server = StandIn()
    boots = MachineBoots(host, transport=httpx.MockTransport(server))
    boots.step()
    boots.step()
    assert server.requests == []
    assert "no admin kubeconfig on the host" in boots.problems["gpu-07"]


def test_kwok_for_a_cluster_is_started_again_and_stopped_with_its_last_machine(
        tmp_path: Path) -> None:
    program = tmp_path / "kwok"
    program.write_text("#!/bin/sh\necho \"$HTTPS_PROXY $*\"\n")
    program.chmod(0o755)
    kwoks = VirtualKwoks(program, tmp_path / "machines", "http://127.0.0.1:3128")
    try:
        kwoks.ensure(SERVER, "admin kubeconfig")
        first = kwoks.processes[SERVER]
        first.wait(timeout=10)
        kubeconfig = tmp_path / "machines" / "train.acme.vc.lab.kubeconfig"
        assert kubeconfig.read_text() == "admin kubeconfig"
        assert kubeconfig.stat().st_mode & 0o777 == 0o600
        kwoks.keep({SERVER})  # it exited: started again
        assert kwoks.processes[SERVER] is not first
        kwoks.processes[SERVER].wait(timeout=10)
        log_text = (tmp_path / "machines" / "train.acme.vc.lab.kwok.log").read_text()
        assert log_text.count("http://127.0.0.1:3128 --kubeconfig=") == 2
        kwoks.keep(set())  # no machine left in the cluster
        assert kwoks.processes == {}
    finally:
        kwoks.stop()
