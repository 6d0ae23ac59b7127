"""A private-nodes cluster's machine (issue 57) through the machines kind, on the in-memory host
and an in-memory virtual cluster, the test playing Metal3 and the machine's kubelet: the token
is minted in the *virtual* cluster, the user data names the virtual cluster's endpoint, only the
machine's CSR is approved, the Node is Ready in the virtual cluster (none on the host), and
release drains it out, wipes it and returns it to the pool; a pass killed between steps is
repaired by the next."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from sqlalchemy import select

from app.audit.models import AuditEvent
from app.clusters.models import VirtualCluster
from app.database.core import Database
from app.kit.config import Settings
from app.kit.crypto import SecretBox
from app.kube.errors import TransientKubeError
from app.kube.manifests import baremetal as metal3
from app.kube.memory import InMemoryKube
from app.machines import service
from app.machines.models import Machine
from app.reconcilers.machines import MachineReconciler
from tests import factories
from tests.nodes.conftest import Later
from tests.support.drive import run_due
from tests.support.kube import InMemoryConnector

NAME = "gpu-l40s-01"
VIRTUAL_SERVER = "https://train.acme.vc.example:8443"
CA_DATA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nVCA\n-----END CERTIFICATE-----\n"
                           ).decode()
KUBECONFIG = yaml.safe_dump({
    "apiVersion": "v1", "kind": "Config", "current-context": "vc",
    "clusters": [{"name": "vc", "cluster": {"server": VIRTUAL_SERVER,
                                            "certificate-authority-data": CA_DATA}}],
    "contexts": [{"name": "vc", "context": {"cluster": "vc", "user": "admin"}}],
    "users": [{"name": "admin", "user": {"token": "admin-token"}}]})
BMH = (metal3.METAL3_API_VERSION, metal3.BAREMETAL_HOST)
CSR = ("certificates.k8s.io/v1", "CertificateSigningRequest")
SETTINGS = Settings(env="test", database_url="sqlite://")
READY = [{"type": t, "status": "True", "reason": "x", "message": "", "observedGeneration": 1,
          "lastTransitionTime": "2026-12-07T00:00:00Z"} for t in ("Ready", "NodeBootstrap")]


@dataclass
class World:
    database: Database
    host: InMemoryKube
    virtual: InMemoryKube
    reconciler: MachineReconciler
    clock: Later
    machine_id: int
    cluster_id: int
    tenant_id: int

    def next_pass(self) -> int:
        self.clock.later(120)
        return run_due(self.reconciler, "test")

    def machine(self) -> Machine:
        with self.database.session() as db:
            row = db.get(Machine, self.machine_id)
            assert row is not None
            db.expunge(row)
            return row

    def assign(self) -> None:
        with self.database.transaction() as db:
            assert service.assign_to_cluster(db, self.machine_id, self.cluster_id,
                                             self.tenant_id, "cluster train", "test")

    def release(self) -> None:
        with self.database.transaction() as db:
            row = db.get(Machine, self.machine_id)
            assert row is not None
            service.release_from_cluster(db, row, self.tenant_id, "cluster train", "test",
                                         "shrunk")

    def metal3_reports(self, state: str, *, image: bool = False) -> None:
        status: dict[str, Any] = {"provisioning": {"state": state}, "operationalStatus": "OK"}
        if image:
            status["provisioning"]["image"] = {"url": self.reconciler.image.url}
        self.host.seed_status(*BMH, NAME, metal3.MACHINES_NAMESPACE, status)

    def user_data(self) -> str:
        found = self.host.get("v1", "Secret", f"{NAME}-user-data", metal3.MACHINES_NAMESPACE)
        assert found is not None
        return base64.b64decode(found["data"]["userData"]).decode()

    def token_secret(self, token_id: str) -> str | None:
        found = self.virtual.get("v1", "Secret", f"bootstrap-token-{token_id}", "kube-system")
        return base64.b64decode(found["data"]["token-secret"]).decode() if found else None

    def kubelet_asks(self, name: str, token_id: str, node: str) -> None:
        """A CSR as the kubelet sends it with its bootstrap token (the API server sets the
        username)."""
        key = ec.generate_private_key(ec.SECP256R1())
        request = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")])).sign(
            key, hashes.SHA256())
        pem = request.public_bytes(serialization.Encoding.PEM)
        self.virtual.seed({"apiVersion": "certificates.k8s.io/v1",
                           "kind": "CertificateSigningRequest", "metadata": {"name": name},
                           "spec": {"request": base64.b64encode(pem).decode(),
                                    "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                                    "usages": ["digital signature", "client auth"],
                                    "username": f"system:bootstrap:{token_id}"}})

    def node_registers(self, ready: bool) -> None:
        self.virtual.seed({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": NAME, "labels": {"nvidia.com/gpu.product": "NVIDIA-L40S",
                                     "gpu-tenant-portal/cluster": str(self.cluster_id)}},
            "spec": {"providerID": metal3.provider_id(NAME)},
            "status": {"conditions": [{"type": "Ready", "status": str(ready)}],
                       "allocatable": {"nvidia.com/gpu": "4"}}})

    def decision(self, name: str) -> str | None:
        found = self.virtual.get(*CSR, name)
        assert found is not None
        return next((c["type"] for c in (found.get("status") or {}).get("conditions") or []),
                    None)


@pytest.fixture
def world(database: Database) -> World:
    with database.transaction() as db:
        host = factories.env_host(db)
        gpu = factories.gpu_class(db, "NVIDIA-L40S")
        tenant = factories.tenant(db, "acme")
        cluster = factories.cluster(
            db, tenant, host, "train", placement="private-nodes", gpu_class_id=gpu.id, gpus=4,
            conditions=READY,
            admin_kubeconfig_encrypted=SecretBox.from_settings(SETTINGS).seal(KUBECONFIG))
        machine = factories.machine(db, host, gpu, NAME, phase="available", gpu_count=4)
        ids = (machine.id, cluster.id, tenant.id)
    host_kube = InMemoryKube(namespaces=("default", "kube-system", "kube-public"))
    virtual = InMemoryKube(namespaces=("default", "kube-system", "kube-public"))
    virtual.seed({"apiVersion": "v1", "kind": "Service",
                  "metadata": {"name": "kube-dns", "namespace": "kube-system"},
                  "spec": {"clusterIP": "10.96.0.10"}})
    connector = InMemoryConnector(host_kube)
    connector.virtual_ports[KUBECONFIG] = virtual
    clock = Later()
    world = World(database, host_kube, virtual,
                  MachineReconciler(SETTINGS, database, connector, now=clock), clock, *ids)
    world.next_pass()
    world.metal3_reports("available")
    world.next_pass()
    return world


def _joined(world: World) -> str:
    """Assigned, imaged and joined; the token id it joined with."""
    world.assign()
    world.next_pass()
    token_id = world.machine().bootstrap_token_id
    assert token_id
    world.metal3_reports("provisioned", image=True)
    world.kubelet_asks("csr-mine", token_id, NAME)
    world.next_pass()
    world.node_registers(ready=True)
    world.next_pass()
    return token_id


def test_an_assigned_machine_joins_the_virtual_cluster_with_a_token_minted_there(
        world: World) -> None:
    world.assign()
    world.next_pass()
    machine = world.machine()
    assert machine.desired == "private" and machine.bootstrap_token_id
    token_id = machine.bootstrap_token_id
    secret = world.token_secret(token_id)
    assert secret is not None  # in the virtual cluster's kube-system
    assert world.host.get("v1", "Secret", f"bootstrap-token-{token_id}", "kube-system") is None
    user_data = world.user_data()
    assert VIRTUAL_SERVER in user_data and CA_DATA in user_data
    assert f"{token_id}.{secret}" in user_data
    assert f"--node-labels=gpu-tenant-portal/cluster={world.cluster_id}" in user_data
    assert "--cluster-dns=10.96.0.10" in user_data
    host = world.host.get(*BMH, NAME, metal3.MACHINES_NAMESPACE)
    assert host is not None and host["spec"]["image"]["url"] == world.reconciler.image.url

    world.metal3_reports("provisioned", image=True)
    world.kubelet_asks("csr-mine", token_id, NAME)
    world.kubelet_asks("csr-other-node", token_id, "someone-else")
    world.next_pass()
    assert (world.decision("csr-mine"), world.decision("csr-other-node")) == (
        "Approved", "Denied")
    assert world.machine().phase == "provisioning"
    world.node_registers(ready=True)
    world.next_pass()
    machine = world.machine()
    assert (machine.phase, machine.node_name, machine.reason) == ("joined", NAME, "")
    assert machine.bootstrap_token_id is None and world.token_secret(token_id) is None
    assert world.host.get("v1", "Node", NAME) is None  # on the virtual cluster only
    assert world.host.get("v1", "Secret", f"{NAME}-user-data",
                          metal3.MACHINES_NAMESPACE) is None


def test_a_csr_of_another_token_is_left_to_its_own_machine(world: World) -> None:
    token_id = _joined(world)
    world.kubelet_asks("csr-stranger", "zzzzzz", NAME)
    world.next_pass()
    assert token_id != "zzzzzz" and world.decision("csr-stranger") is None


def test_released_machine_is_drained_out_wiped_and_returned_to_the_pool(world: World) -> None:
    _joined(world)
    world.virtual.seed({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": "train-0", "namespace": "default"},
                        "spec": {"nodeName": NAME}})
    world.release()
    world.next_pass()
    assert world.virtual.get("v1", "Node", NAME) is None
    assert world.virtual.get("v1", "Pod", "train-0", "default") is None
    host = world.host.get(*BMH, NAME, metal3.MACHINES_NAMESPACE)
    assert host is not None and "image" not in host["spec"]
    machine = world.machine()
    assert machine.cluster_id == world.cluster_id and machine.phase == "deprovisioning"
    world.metal3_reports("deprovisioning")
    world.next_pass()
    assert world.machine().cluster_id == world.cluster_id  # not before it is wiped
    world.metal3_reports("available")
    world.next_pass()
    machine = world.machine()
    assert (machine.cluster_id, machine.desired, machine.phase) == (None, "pool", "available")
    with world.database.session() as db:
        actions = list(db.scalars(select(AuditEvent.action).where(
            AuditEvent.target_type == "machine").order_by(AuditEvent.id)))
    assert [a for a in actions if a in ("machine.assigned", "machine.released",
                                        "machine.returned")] == [
        "machine.assigned", "machine.released", "machine.returned"]


def test_a_pass_killed_before_the_token_reaches_the_virtual_cluster_mints_another(
        world: World) -> None:
    world.assign()
    world.virtual.inject("apply", TransientKubeError("connection reset"), times=1,
                         match=lambda call: call.namespace == "kube-system")
    world.next_pass()
    lost = world.machine().bootstrap_token_id
    assert lost and world.token_secret(lost) is None  # recorded first, Secret never made
    host = world.host.get(*BMH, NAME, metal3.MACHINES_NAMESPACE)
    assert host is not None and "image" not in host["spec"]
    world.next_pass()
    token_id = world.machine().bootstrap_token_id
    assert token_id and token_id != lost
    secret = world.token_secret(token_id)
    assert secret is not None and f"{token_id}.{secret}" in world.user_data()


def test_a_pass_killed_after_approving_finishes_the_join_on_the_next(world: World) -> None:
    world.assign()
    world.next_pass()
    token_id = world.machine().bootstrap_token_id
    assert token_id
    world.metal3_reports("provisioned", image=True)
    world.kubelet_asks("csr-mine", token_id, NAME)
    world.node_registers(ready=True)
    world.virtual.inject("delete", TransientKubeError("connection reset"), times=1)
    world.next_pass()
    assert world.decision("csr-mine") == "Approved"
    assert world.machine().phase != "joined"
    world.next_pass()
    machine = world.machine()
    assert machine.phase == "joined" and world.token_secret(token_id) is None


def test_a_machine_waits_while_its_cluster_is_not_ready_and_a_host_node_has_its_name(
        world: World) -> None:
    with world.database.transaction() as db:
        cluster = db.get(VirtualCluster, world.cluster_id)
        assert cluster is not None
        cluster.conditions = []
    world.assign()
    world.next_pass()
    machine = world.machine()
    assert "waiting for cluster train to be Ready" in machine.reason
    assert machine.bootstrap_token_id is None
    with world.database.transaction() as db:
        cluster = db.get(VirtualCluster, world.cluster_id)
        assert cluster is not None
        cluster.conditions = READY
    world.host.seed({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NAME}})
    world.next_pass()
    assert "the host cluster has a Node named" in world.machine().reason
    host = world.host.get(*BMH, NAME, metal3.MACHINES_NAMESPACE)
    assert host is not None and "image" not in host["spec"]
