"""The machines API and pages: platform admins only, the BMC password never comes back (every
response, page, audit row and log line is scanned for it), what Metal3 would refuse is a 422
naming the field, and a machine whose node is dedicated is not released silently."""

from __future__ import annotations

import logging
import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.hosts.models import HostCluster
from app.machines.models import Machine
from app.process.devmode import DEMO_ADMIN
from app.workqueue.models import WorkItem
from tests import factories
from tests.support import oidc
from tests.support.principals import bearer
from tests.support.web import csrf_of

PASSWORD = "bmc-pa55word-never-shown"
SECOND_PASSWORD = "an0ther-bmc-pa55word"
API = "/api/v1/machines"
H100 = "NVIDIA-H100-80GB-HBM3"


def register_body(name: str = "gpu-r4-07", host: str = "gpu-eu-2") -> dict[str, object]:
    return {"name": name, "host_cluster": host, "bmc_address": "redfish+https://10.0.4.7/x",
            "bmc": {"username": "admin", "password": PASSWORD},
            "boot_mac": "0C-C4-7A-12-34-56", "gpu_class": H100, "gpu_count": 8, "rack": "r4"}


def _world(db: Session) -> dict[str, str]:
    factories.registered_host(db, "gpu-eu-2")
    factories.gpu_class(db, H100)
    auth = bearer(db, factories.user(db, admin=True))
    db.commit()
    return auth


def _audit_text(db: Session) -> str:
    db.expire_all()
    return " ".join(f"{e.before} {e.after} {e.target_label}"
                    for e in db.scalars(select(AuditEvent)))


def test_the_api_round_trip_never_returns_stores_in_clear_or_logs_the_password(
        client: TestClient, db: Session, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    auth = _world(db)
    seen: list[str] = []

    def call(method: str, path: str, **kwargs: object) -> dict[str, object]:
        response = client.request(method, path, headers=auth, **kwargs)  # type: ignore[arg-type]
        seen.append(response.text)
        assert response.status_code < 400, response.text
        return response.json() if response.content else {}

    created = call("POST", API, json=register_body())
    assert (created["boot_mac"], created["phase"], created["desired"]) == (
        "0c:c4:7a:12:34:56", "registering", "pool")
    assert "bmc" not in created
    call("GET", API)
    assert call("POST", f"{API}/gpu-r4-07/provision")["desired"] == "provisioned"
    released = call("POST", f"{API}/gpu-r4-07/release")
    assert (released["desired"], released["generation"]) == ("pool", 3)
    call("PUT", f"{API}/gpu-r4-07/bmc-credentials",
         json={"username": "root", "password": SECOND_PASSWORD})
    assert call("DELETE", f"{API}/gpu-r4-07")["deleting"] is True
    call("GET", f"{API}/gpu-r4-07")
    call("GET", "/api/v1/audit", params={"limit": 100})
    call("GET", "/openapi.json")
    stored = db.scalar(select(Machine.bmc_credentials_encrypted))
    for text in [*seen, caplog.text, _audit_text(db), stored or ""]:
        assert PASSWORD not in text and SECOND_PASSWORD not in text
    actions = {e.action for e in db.scalars(select(AuditEvent))}
    assert {"machine.register", "machine.provision", "machine.release",
            "machine.bmc_credentials_replace", "machine.delete"} <= actions


def test_every_change_enqueues_the_machine_for_the_worker(client: TestClient,
                                                          db: Session) -> None:
    auth = _world(db)
    machine_id = client.post(API, json=register_body(), headers=auth).json()["id"]
    queued = db.scalar(select(WorkItem).where(WorkItem.kind == "machines",
                                              WorkItem.key == str(machine_id)))
    assert queued is not None


@pytest.mark.parametrize(("field", "value", "message"), [
    ("bmc_address", "10.0.4.7", "the BMC address needs a driver scheme, e.g. ipmi://"),
    ("bmc_address", "redfsh://10.0.4.7",
     "the BMC address starts with 'redfsh', which is no BMC driver: the scheme names the driver"),
    ("bmc_address", "http://10.0.4.7", "the BMC address starts with 'http', which is no BMC"),
    ("bmc_address", "ipmi+https://10.0.4.7",
     "the BMC address uses driver 'ipmi', which takes no '+https'"),
    ("bmc_address", "redfish://root:calvin@10.0.4.7/x",
     "the BMC address must not carry a user or password"),
    ("bmc_address", "", "required"),
    ("boot_mac", "0c:c4:7a:12:34", "a MAC address"),
    ("name", "Not_A_Label", "DNS-1123"),
])
def test_what_metal3_would_refuse_is_a_422_naming_the_field(
        client: TestClient, db: Session, field: str, value: str, message: str) -> None:
    auth = _world(db)
    response = client.post(API, json={**register_body(), field: value}, headers=auth)
    assert response.status_code == 422
    [error] = response.json()["errors"]
    assert error["field"] == field and message in error["message"]
    assert PASSWORD not in response.text


def test_an_unknown_host_or_class_and_a_taken_name_are_refused(client: TestClient,
                                                               db: Session) -> None:
    auth = _world(db)
    no_host = client.post(API, json=register_body(host="nowhere"), headers=auth)
    assert no_host.status_code == 422 and no_host.json()["errors"][0]["field"] == "host_cluster"
    no_class = client.post(API, json={**register_body(), "gpu_class": "GTX-480"}, headers=auth)
    assert no_class.status_code == 422
    assert client.post(API, json=register_body(), headers=auth).status_code == 201
    assert client.post(API, json=register_body(), headers=auth).status_code == 409


def test_only_platform_admins_reach_the_machines_api(client: TestClient, db: Session) -> None:
    auth = _world(db)
    client.post(API, json=register_body(), headers=auth)
    tenant_admin = factories.user(db)
    factories.membership(db, factories.tenant(db, "acme"), tenant_admin, "admin")
    member = bearer(db, tenant_admin)
    read_only_admin = bearer(db, factories.user(db, admin=True), "read")
    db.commit()
    assert client.get(API, headers=member).status_code == 403
    assert client.get(f"{API}/gpu-r4-07", headers=member).status_code == 403
    assert client.post(f"{API}/gpu-r4-07/provision", headers=member).status_code == 403
    assert client.post(API, json=register_body("other"), headers=read_only_admin
                       ).status_code == 403


def test_a_machine_whose_node_is_dedicated_is_not_released(client: TestClient,
                                                           db: Session) -> None:
    auth = _world(db)
    client.post(API, json=register_body(), headers=auth)
    client.post(f"{API}/gpu-r4-07/provision", headers=auth)
    machine = db.scalar(select(Machine))
    assert machine is not None
    machine.node_name, machine.phase = "gpu-r4-07", "joined"
    host = db.get(HostCluster, machine.host_cluster_id)
    assert host is not None
    node = factories.node(db, host, None, name="gpu-r4-07")
    factories.assignment(db, node, factories.tenant(db, "acme"))
    db.commit()
    shown = client.get(f"{API}/gpu-r4-07", headers=auth).json()
    assert shown["tenant"] == "acme"
    refused = client.post(f"{API}/gpu-r4-07/release", headers=auth)
    assert refused.status_code == 409
    assert "dedicated to tenant acme" in refused.json()["detail"]
    assert client.get(f"{API}/gpu-r4-07", headers=auth).json()["desired"] == "provisioned"


def test_a_provisioned_machine_cannot_be_deleted(client: TestClient, db: Session) -> None:
    auth = _world(db)
    client.post(API, json=register_body(), headers=auth)
    client.post(f"{API}/gpu-r4-07/provision", headers=auth)
    refused = client.delete(f"{API}/gpu-r4-07", headers=auth)
    assert refused.status_code == 409 and "release it" in refused.json()["detail"]


def test_the_pages_register_show_and_act_without_showing_the_password(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    factories.registered_host(db, "gpu-eu-2")
    factories.gpu_class(db, H100)
    db.commit()
    oidc.sign_in(client, DEMO_ADMIN)
    listing = client.get("/admin/machines")
    assert listing.status_code == 200 and "Register a machine" in listing.text
    csrf = csrf_of(listing.text)
    form = {"csrf_token": csrf, "name": "gpu-r4-07", "host_cluster": "gpu-eu-2",
            "bmc_address": "redfish+https://10.0.4.7/x", "bmc_username": "admin",
            "bmc_password": PASSWORD, "boot_mac": "0c:c4:7a:12:34:56", "gpu_class": H100,
            "gpu_count": "8", "rack": "r4"}
    refused = client.post("/admin/machines", data={**form, "bmc_address": "10.0.4.7"})
    assert refused.status_code == 422 and "driver scheme" in refused.text
    created = client.post("/admin/machines", data=form)
    assert created.status_code == 200 and "registering" in created.text
    provisioned = client.post("/admin/machines/gpu-r4-07/provision", data={"csrf_token": csrf})
    assert provisioned.status_code == 200 and "Release to the pool" in provisioned.text
    refused_delete = client.post("/admin/machines/gpu-r4-07/delete", data={"csrf_token": csrf})
    assert refused_delete.status_code == 409 and "release it" in refused_delete.text
    rotated = client.post("/admin/machines/gpu-r4-07/bmc-credentials", data={
        "csrf_token": csrf, "bmc_username": "root", "bmc_password": SECOND_PASSWORD})
    assert rotated.status_code == 200
    pages = [refused.text, created.text, provisioned.text, rotated.text,
             client.get("/admin/machines").text, client.get("/audit").text]
    for page in pages:
        assert PASSWORD not in page and SECOND_PASSWORD not in page


def test_the_machine_page_shows_metal3s_reason_for_a_failed_machine(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    host = factories.registered_host(db, "gpu-eu-2")
    machine = factories.machine(db, host, factories.gpu_class(db, H100), "gpu-r4-07")
    machine.phase, machine.provisioning_state = "failed", "registering"
    machine.reason = "Failed to get power state for node: IPMI authentication failed"
    db.commit()
    oidc.sign_in(client, DEMO_ADMIN)
    page = client.get("/admin/machines/gpu-r4-07")
    assert page.status_code == 200
    assert "failed</span> — Failed to get power state for node: IPMI authentication failed" in (
        page.text)
    listing = client.get("/admin/machines").text
    assert "IPMI authentication failed" in listing


def test_a_joined_machine_links_to_its_node_on_the_pages(client: TestClient, db: Session,
                                                        oidc_issuer: str) -> None:
    host = factories.registered_host(db, "gpu-eu-2")
    machine = factories.machine(db, host, factories.gpu_class(db, H100), "gpu-r4-07",
                                desired="provisioned")
    machine.phase, machine.node_name = "joined", "gpu-r4-07"
    db.commit()
    oidc.sign_in(client, DEMO_ADMIN)
    link = '<a href="/admin/nodes/gpu-r4-07">gpu-r4-07</a>'
    assert link in client.get("/admin/machines/gpu-r4-07").text
    assert link in client.get("/admin/machines").text


def test_the_pages_say_which_private_nodes_cluster_a_machine_serves(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    host = factories.registered_host(db, "gpu-eu-2")
    gpu = factories.gpu_class(db, H100)
    cluster = factories.cluster(db, factories.tenant(db, "acme"), host, "metal",
                                placement="private-nodes", gpu_class_id=gpu.id, gpus=8)
    factories.machine(db, host, gpu, "gpu-r4-07", cluster_id=cluster.id, desired="private",
                      phase="joined", node_name="gpu-r4-07")
    db.commit()
    oidc.sign_in(client, DEMO_ADMIN)
    row = re.search(r'<tr id="machine-gpu-r4-07">(.*?)</tr>',
                    client.get("/admin/machines").text, re.S)
    assert row is not None
    for page in (row.group(1), client.get("/admin/machines/gpu-r4-07").text):
        assert 'href="/t/acme/clusters/metal"' in page
        assert 'href="/admin/nodes/gpu-r4-07"' not in page  # its node is not the host's
