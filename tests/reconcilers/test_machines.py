"""The machines reconciler on the in-memory host, the test playing Metal3's baremetal-operator
(it sets the BareMetalHost's status) and the machine's kubelet (it adds the Node): a machine
goes from registration to joined and back to the pool, a BMC error is its reason, a worker
killed mid-provision converges, a deleted machine leaves nothing behind."""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from sqlalchemy import select, update

from app.audit.models import AuditEvent
from app.auth.principal import Principal
from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kit.errors import Conflict
from app.kube.errors import PermanentKubeError, TransientKubeError
from app.kube.manifests import baremetal as metal3
from app.kube.memory import InMemoryKube
from app.kube.port import Manifest
from app.machines import service
from app.machines.models import Machine
from app.nodes.models import Node
from app.reconcilers.machines import MachineReconciler
from app.reconcilers.nodes import NodeReconciler
from app.workqueue import MACHINES, enqueue
from app.workqueue.models import WorkItem
from tests import factories
from tests.nodes.conftest import Later
from tests.support.drive import run_due
from tests.support.kube import InMemoryConnector

PASSWORD = "bmc-pa55word-never-logged"
NAME = "gpu-r4-07"
SERVER = "https://host.example.com:6443"
CA_DATA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
                           ).decode()
BMH = (metal3.METAL3_API_VERSION, metal3.BAREMETAL_HOST)


@dataclass
class Lab:
    database: Database
    kube: InMemoryKube
    reconciler: MachineReconciler
    clock: Later
    machine_id: int

    def next_pass(self) -> int:
        self.clock.later(120)
        return run_due(self.reconciler, "test")

    def machine(self) -> Machine:
        with self.database.session() as db:
            row = db.get(Machine, self.machine_id)
            assert row is not None
            db.expunge(row)
            return row

    def ask(self, **values: Any) -> None:
        """An admin's change, as the service makes it: a new generation."""
        with self.database.transaction() as db:
            db.execute(update(Machine).where(Machine.id == self.machine_id)
                       .values(generation=Machine.generation + 1, **values))
            enqueue(db, MACHINES, self.machine_id)

    def host(self) -> Manifest | None:
        return self.kube.get(*BMH, NAME, metal3.MACHINES_NAMESPACE)

    def metal3_reports(self, state: str, *, image: bool = False, error: str = "",
                       message: str = "") -> None:
        status: Manifest = {"provisioning": {"state": state}, "operationalStatus": "OK"}
        if image:
            status["provisioning"]["image"] = {"url": self.reconciler.image.url}
        if error:
            status.update(operationalStatus="error", errorType=error, errorMessage=message)
        self.kube.seed_status(*BMH, NAME, metal3.MACHINES_NAMESPACE, status)

    def kubelet_joins(self, ready: bool = True) -> None:
        self.kube.seed({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NAME, "labels": {
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "spec": {"providerID": metal3.provider_id(NAME)},
            "status": {"conditions": [{"type": "Ready", "status": str(ready)}],
                       "allocatable": {"nvidia.com/gpu": "8"}}})

    def secret(self, name: str, namespace: str) -> dict[str, str] | None:
        found = self.kube.get("v1", "Secret", name, namespace)
        if found is None:
            return None
        return {k: base64.b64decode(v).decode() for k, v in (found.get("data") or {}).items()}


@pytest.fixture
def lab(database: Database) -> Lab:
    with database.transaction() as db:
        host = factories.env_host(db)
        row = factories.machine(db, host, factories.gpu_class(db), NAME, password=PASSWORD)
        machine_id = row.id
    kube = InMemoryKube(namespaces=("default", "kube-system", "kube-public"))
    kube.seed({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cluster-info", "namespace": "kube-public"},
               "data": {"kubeconfig": yaml.safe_dump({
                   "clusters": [{"name": "", "cluster": {
                       "server": SERVER, "certificate-authority-data": CA_DATA}}]})}})
    clock = Later()
    settings = Settings(env="test", database_url="sqlite://")
    return Lab(database, kube, MachineReconciler(settings, database, InMemoryConnector(kube),
                                                 now=clock), clock, machine_id)


def test_a_registered_machine_is_an_online_host_without_image_until_metal3_has_it_available(
        lab: Lab) -> None:
    lab.next_pass()
    host = lab.host()
    assert host is not None
    assert host["spec"]["online"] is True and "image" not in host["spec"]
    assert host["spec"]["bmc"]["address"] == "redfish+http://10.0.0.9/redfish/v1/Systems/1"
    assert lab.secret(f"{NAME}-bmc", metal3.MACHINES_NAMESPACE) == {
        "username": "admin", "password": PASSWORD}
    assert lab.machine().phase == "registering"
    for state, phase in (("registering", "registering"), ("inspecting", "inspecting"),
                         ("available", "available")):
        lab.metal3_reports(state)
        lab.next_pass()
        assert (lab.machine().phase, lab.machine().provisioning_state) == (phase, state)
    machine = lab.machine()
    assert machine.reason == "" and machine.observed_generation == 1
    assert {c["type"]: c["status"] for c in machine.conditions}["HostRegistered"] == "True"


def test_a_bmc_error_is_the_machines_reason(lab: Lab) -> None:
    lab.next_pass()
    lab.metal3_reports("registering", error="registration error",
                       message="Failed to get power state for node: IPMI authentication failed")
    lab.next_pass()
    machine = lab.machine()
    assert machine.phase == "failed"
    assert machine.reason == "Failed to get power state for node: IPMI authentication failed"
    with lab.database.session() as db:
        assert db.scalar(select(AuditEvent).where(AuditEvent.action == "machine.failed"))


def test_a_host_that_refuses_the_baremetalhost_says_why_on_the_machine(lab: Lab) -> None:
    lab.kube.inject("apply", PermanentKubeError(
        "the server could not find the requested resource (BareMetalHost)", reason="NotFound",
        status=404), times=1, match=_fails_on(metal3.BAREMETAL_HOST))
    lab.next_pass()
    machine = lab.machine()
    assert machine.phase == "registering"
    assert machine.reason == ("the host cluster refused: the server could not find the "
                              "requested resource (BareMetalHost)")


def test_provisioned_joined_released_and_back_in_the_pool(
        lab: Lab, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    lab.next_pass()
    lab.metal3_reports("available")
    lab.ask(desired="provisioned")
    lab.next_pass()
    machine = lab.machine()
    assert machine.phase == "available" and machine.bootstrap_token_id
    token = lab.secret(f"bootstrap-token-{machine.bootstrap_token_id}", "kube-system")
    assert token is not None and token["token-id"] == machine.bootstrap_token_id
    user_data = lab.secret(f"{NAME}-user-data", metal3.MACHINES_NAMESPACE)
    assert user_data is not None
    assert f"{machine.bootstrap_token_id}.{token['token-secret']}" in user_data["userData"]
    assert SERVER in user_data["userData"] and metal3.provider_id(NAME) in user_data["userData"]
    host = lab.host()
    assert host is not None and host["spec"]["image"]["url"] == lab.reconciler.image.url
    assert host["spec"]["userData"]["name"] == f"{NAME}-user-data"

    lab.metal3_reports("provisioning")
    lab.next_pass()
    assert lab.machine().phase == "provisioning"
    lab.metal3_reports("provisioned", image=True)
    lab.next_pass()
    assert lab.machine().phase == "provisioning"  # imaged, no Node yet: never guessed
    lab.kubelet_joins(ready=False)
    lab.next_pass()
    assert lab.machine().phase == "provisioning"
    lab.kubelet_joins(ready=True)
    lab.next_pass()
    machine = lab.machine()
    assert (machine.phase, machine.node_name, machine.reason) == ("joined", NAME, "")
    with lab.database.session() as db:
        assert db.scalar(select(WorkItem).where(WorkItem.kind == "nodes"))  # inventory told

    lab.ask(desired="pool")
    lab.next_pass()
    host = lab.host()
    assert host is not None and "image" not in host["spec"] and "userData" not in host["spec"]
    assert lab.machine().phase == "deprovisioning"
    assert lab.kube.get("v1", "Node", NAME) is not None  # until Metal3 starts deprovisioning
    lab.metal3_reports("deprovisioning")
    lab.next_pass()
    machine = lab.machine()
    assert machine.phase == "deprovisioning" and machine.bootstrap_token_id is None
    assert lab.kube.get("v1", "Node", NAME) is None
    assert lab.secret(f"bootstrap-token-{token['token-id']}", "kube-system") is None
    assert lab.secret(f"{NAME}-user-data", metal3.MACHINES_NAMESPACE) is None
    lab.metal3_reports("available")
    lab.next_pass()
    machine = lab.machine()
    assert (machine.phase, machine.node_name) == ("available", None)

    with lab.database.session() as db:
        trail = " ".join(f"{e.before} {e.after}" for e in db.scalars(select(AuditEvent)))
    for text in (caplog.text, trail):
        assert PASSWORD not in text and token["token-secret"] not in text


def _fails_on(kind: str) -> Any:
    return lambda call: call.kind == kind


def test_a_worker_killed_before_the_host_is_imaged_finishes_with_the_same_token(
        lab: Lab) -> None:
    lab.next_pass()
    lab.metal3_reports("available")
    lab.ask(desired="provisioned")
    lab.kube.inject("apply", TransientKubeError("connection reset"), times=1,
                    match=_fails_on(metal3.BAREMETAL_HOST))
    lab.next_pass()
    first = lab.machine().bootstrap_token_id
    host = lab.host()
    assert first and host is not None and "image" not in host["spec"]
    lab.next_pass()
    host = lab.host()
    assert host is not None and host["spec"]["image"]["url"] == lab.reconciler.image.url
    assert lab.machine().bootstrap_token_id == first


def test_a_worker_killed_before_the_token_exists_mints_another_that_the_user_data_carries(
        lab: Lab) -> None:
    lab.next_pass()
    lab.metal3_reports("available")
    lab.ask(desired="provisioned")
    lab.kube.inject("apply", TransientKubeError("connection reset"), times=1,
                    match=lambda call: call.namespace == "kube-system")
    lab.next_pass()
    lost = lab.machine().bootstrap_token_id
    assert lost and lab.secret(f"bootstrap-token-{lost}", "kube-system") is None
    lab.next_pass()
    machine = lab.machine()
    assert machine.bootstrap_token_id and machine.bootstrap_token_id != lost
    token = lab.secret(f"bootstrap-token-{machine.bootstrap_token_id}", "kube-system")
    user_data = lab.secret(f"{NAME}-user-data", metal3.MACHINES_NAMESPACE)
    assert token is not None and user_data is not None
    assert f"{machine.bootstrap_token_id}.{token['token-secret']}" in user_data["userData"]
    host = lab.host()
    assert host is not None and host["spec"]["image"]["url"] == lab.reconciler.image.url


def test_a_token_near_its_end_is_replaced_while_metal3_has_not_read_it(lab: Lab) -> None:
    lab.next_pass()
    lab.metal3_reports("available")
    lab.ask(desired="provisioned")
    lab.next_pass()
    first = lab.machine().bootstrap_token_id
    lab.clock.later(lab.reconciler.settings.machine_join_token_ttl_seconds * 0.8)
    lab.next_pass()
    assert lab.machine().bootstrap_token_id != first
    assert lab.secret(f"bootstrap-token-{first}", "kube-system") is None


def test_a_deleted_machine_leaves_no_host_and_no_secret(lab: Lab) -> None:
    lab.next_pass()
    lab.metal3_reports("available")
    lab.next_pass()
    lab.ask(deleting_at=utcnow())
    lab.next_pass()
    assert lab.host() is None
    assert lab.secret(f"{NAME}-bmc", metal3.MACHINES_NAMESPACE) is None
    with lab.database.session() as db:
        assert db.get(Machine, lab.machine_id) is None
        assert db.scalar(select(AuditEvent).where(AuditEvent.action == "machine.deleted"))


def test_a_joined_machines_node_is_in_the_inventory_and_not_released_while_dedicated(
        lab: Lab) -> None:
    lab.next_pass()
    lab.metal3_reports("available")
    lab.ask(desired="provisioned")
    lab.next_pass()
    lab.metal3_reports("provisioned", image=True)
    lab.kubelet_joins()
    lab.next_pass()
    assert lab.machine().phase == "joined"
    settings = Settings(env="test", database_url="sqlite://")
    run_due(NodeReconciler(settings, lab.database, InMemoryConnector(lab.kube)), "test")
    with lab.database.transaction() as db:
        machine = db.get(Machine, lab.machine_id)
        assert machine is not None
        node = db.scalar(select(Node).where(Node.host_cluster_id == machine.host_cluster_id,
                                            Node.name == NAME))
        assert node is not None and node.gpu_count == 8 and node.gpu_class_id is not None
        factories.assignment(db, node, factories.tenant(db, "acme"))
        admin = Principal(factories.user(db, admin=True), via="token")
        with pytest.raises(Conflict, match="dedicated to tenant acme"):
            service.release(db, admin, NAME)
        assert service.get_machine(db, admin, NAME).tenant == "acme"


def test_a_joined_machine_whose_node_reports_other_gpus_says_so(lab: Lab) -> None:
    with lab.database.transaction() as db:
        db.execute(update(Machine).values(gpu_count=4))
    lab.next_pass()
    lab.metal3_reports("available")
    lab.ask(desired="provisioned")
    lab.next_pass()
    lab.metal3_reports("provisioned", image=True)
    lab.kubelet_joins()
    lab.next_pass()
    machine = lab.machine()
    assert machine.phase == "joined"
    assert machine.reason == ("its node reports 8 GPUs of NVIDIA-H100-80GB-HBM3; 4 of "
                              "NVIDIA-H100-80GB-HBM3 expected")


def _shown(lab: Lab) -> tuple[str, dict[str, tuple[str, str, str]]]:
    """The machine's reason and conditions as its page and the API show them."""
    with lab.database.session() as db:
        machine = service.get_machine(db, Principal(factories.user(db, admin=True), via="token"),
                                      NAME)
    return machine.reason, {c.type: (c.status, c.reason, c.message) for c in machine.conditions}


def test_a_host_with_no_address_to_join_says_so_on_the_machine_until_it_has_one(
        lab: Lab) -> None:
    lab.next_pass()
    lab.metal3_reports("available")
    lab.next_pass()
    cluster_info = lab.kube.get("v1", "ConfigMap", "cluster-info", "kube-public")
    assert cluster_info is not None
    lab.kube.delete("v1", "ConfigMap", "cluster-info", "kube-public")
    lab.ask(desired="provisioned")
    lab.next_pass()
    reason, conditions = _shown(lab)
    assert reason.startswith("no API server address and CA to join the host cluster with")
    status, why, message = conditions["Reconciled"]
    assert (status, why, message) == ("False", "NoJoinEndpoint", reason)
    assert "give the host a kubeconfig that carries its CA" in message
    assert conditions["HostRegistered"][0] == "True"  # what Metal3 said last stays

    lab.kube.seed(cluster_info)
    lab.clock.later(lab.reconciler.resync_seconds)
    lab.next_pass()
    reason, conditions = _shown(lab)
    assert conditions["Reconciled"][:2] == ("True", "Reconciled")
    assert reason == "waiting for Metal3 to start provisioning"


def test_a_host_the_worker_has_no_client_for_says_so_on_the_machine(lab: Lab) -> None:
    lab.reconciler.kube = InMemoryConnector(None)
    lab.next_pass()
    reason, conditions = _shown(lab)
    assert reason.startswith("the portal has no Kubernetes client for host cluster")
    assert conditions["Reconciled"][:2] == ("False", "NoClient")
