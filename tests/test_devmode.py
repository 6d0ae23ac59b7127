"""``portal dev`` on its simulated host: the wiring, and the whole journey through the API
with the worker converging on the in-memory fleet; a bare-metal machine joining in seconds."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from app.kit.config import Settings
from app.kube.helm import SimulatedInstaller
from app.kube.memory import InMemoryKube
from app.kube.simulated import SIMULATED_DOMAIN, SimulatedHost
from app.process.asgi import create_app
from app.process.devmode import (
    DEMO_ADMIN,
    DEMO_TENANT_ADMIN,
    check_clusters_on_the_new_host,
    dev_settings,
    simulated_host_for,
)
from app.process.worker import build_worker
from tests.support.dev_portal import DevPortal, running_dev_portal
from tests.support.waiting import wait_for

H100 = "NVIDIA-H100-80GB-HBM3"


def test_dev_simulates_a_host_by_default(settings: Settings) -> None:
    simulation = simulated_host_for(settings, simulate=True)
    assert isinstance(simulation, SimulatedHost)
    names = {node["metadata"]["name"] for node in simulation.kube.objects("Node")}
    assert {"h100-r1-n1", "h100-r2-n4", "gb200-c1-n1", "l40s-n1", "a100-mig-n1",
            "cpu-n1"} <= names


def test_no_simulate_leaves_the_host_unconfigured(settings: Settings) -> None:
    assert simulated_host_for(settings, simulate=False) is None


def test_a_real_kubeconfig_turns_the_simulation_off(settings: Settings, tmp_path: Path) -> None:
    real = settings.model_copy(update={"kubeconfig": str(tmp_path / "host.kubeconfig")})
    assert simulated_host_for(real, simulate=True) is None


def test_dev_settings_on_the_simulated_host_name_an_unreachable_endpoint(
    settings: Settings,
) -> None:
    simulated = dev_settings(settings, database_url="sqlite://", issuer="http://idp",
                             simulated=True)
    assert simulated.simulated_host
    endpoint = simulated.cluster_endpoint_template.format(cluster="train", tenant="demo")
    assert endpoint == f"https://train.demo.{SIMULATED_DOMAIN}"
    real = dev_settings(settings, database_url="sqlite://", issuer="http://idp",
                        simulated=False)
    assert not real.simulated_host
    assert real.cluster_endpoint_template == settings.cluster_endpoint_template


@pytest.fixture
def dev_portal(tmp_path: Path, settings: Settings) -> Iterator[DevPortal]:
    with running_dev_portal(tmp_path, settings) as portal:
        yield portal


def test_the_inventory_sync_finds_the_demo_fleet(dev_portal: DevPortal) -> None:
    dev_portal.converge(1)
    answer = dev_portal.client.get("/api/v1/nodes", params={"limit": 100},
                                   headers=dev_portal.as_user(DEMO_ADMIN))
    assert answer.status_code == 200, answer.text
    nodes = {node["name"]: node for node in answer.json()["items"]}
    assert "cpu-n1" not in nodes  # the GPU inventory ignores CPU-only nodes
    assert len(nodes) == 16
    assert not nodes["h100-r2-n4"]["ready"]
    assert sum(1 for n in nodes.values() if n["gpu_class"] == H100 and n["ready"]) == 7
    assert {n["clique"] for n in nodes.values() if n["name"].startswith("gb200")} == {
        "2f1c9a3e-7b4d-4c1e-9f0a-1d2e3f4a5b6c.1"}
    assert nodes["a100-mig-n1"]["gpus"] == 0
    assert nodes["a100-mig-n1"]["mig_resources"]["nvidia.com/mig-1g.10gb"] == 14
    fleet = dev_portal.client.get("/admin/fleet", headers={
        "accept": "text/html", **dev_portal.as_user(DEMO_ADMIN)})
    assert "gb200-c1-n3" in fleet.text
    assert 'data-testid="simulated-host-banner"' in fleet.text


def approved_h100_quota(dev_portal: DevPortal) -> int:
    """Alice asks for 8 H100s and the admin approves; the class id."""
    client, alice = dev_portal.client, dev_portal.as_user(DEMO_TENANT_ADMIN)
    classes = client.get("/api/v1/gpu-classes", headers=alice).json()["items"]
    h100: int = next(c["id"] for c in classes if c["product"] == H100)
    asked = client.post("/api/v1/tenants/demo/quota-requests", headers=alice,
                        json={"gpu_class_id": h100, "gpus": 8, "reason": "first run"})
    assert asked.status_code == 201, asked.text
    approved = client.post(f"/api/v1/quota-requests/{asked.json()['id']}/approve",
                           headers=dev_portal.as_user(DEMO_ADMIN), json={})
    assert approved.status_code == 200, approved.text
    return h100


def test_quota_nodes_cluster_ready_kubeconfig_issued_and_revoked(dev_portal: DevPortal) -> None:
    client, alice, admin = (dev_portal.client, dev_portal.as_user(DEMO_TENANT_ADMIN),
                            dev_portal.as_user(DEMO_ADMIN))
    dev_portal.converge(1)
    h100 = approved_h100_quota(dev_portal)
    assigned = client.put("/api/v1/nodes/h100-r1-n1/assignment", headers=admin,
                          json={"tenant": "demo"})
    assert assigned.status_code == 200, assigned.text
    created = client.post("/api/v1/tenants/demo/clusters", headers=alice, json={
        "name": "train", "placement": "dedicated-nodes", "gpu_class_id": h100, "gpus": 8})
    assert created.status_code == 201, created.text

    dev_portal.converge()

    node = dev_portal.simulation.kube.get("v1", "Node", "h100-r1-n1")
    assert node is not None
    assert "demo" in node["metadata"]["labels"].values()
    cluster = client.get("/api/v1/tenants/demo/clusters/train", headers=alice).json()
    ready = next(c for c in cluster["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", cluster["conditions"]

    issued = client.post("/api/v1/tenants/demo/clusters/train/kubeconfigs", headers=alice,
                         json={"role": "view"})
    assert issued.status_code == 201, issued.text
    assert issued.text.startswith("# SIMULATED HOST")
    config = yaml.safe_load(issued.text)
    assert config["clusters"][0]["cluster"]["server"] == f"https://train.demo.{SIMULATED_DOMAIN}"
    assert config["current-context"] == "demo-train-view-simulated"
    token = config["users"][0]["user"]["token"]
    virtual = virtual_cluster(dev_portal.simulation, "t-demo--train", "train")
    assert virtual.token_valid(token)

    grant = issued.headers["X-Kubeconfig-Grant"]
    revoked = client.delete(f"/api/v1/tenants/demo/clusters/train/kubeconfigs/{grant}",
                            headers=alice)
    assert revoked.status_code == 204
    assert not virtual.token_valid(token)

    trail = client.get("/api/v1/audit", params={"tenant": "demo", "limit": 100},
                       headers=alice).json()["items"]
    actions = {event["action"] for event in trail}
    assert {"quota_request.create", "quota_request.approve", "virtual_cluster.ready",
            "kubeconfig.issue", "kubeconfig.revoke"} <= actions


def virtual_cluster(simulation: SimulatedHost, namespace: str, release: str) -> InMemoryKube:
    """The simulated virtual cluster, reached with the admin kubeconfig its Secret exports."""
    secret = simulation.host().get("v1", "Secret", f"vc-{release}", namespace)
    assert secret is not None
    port = simulation.virtual(base64.b64decode(secret["data"]["config"]).decode())
    assert isinstance(port, InMemoryKube)
    return port


def test_a_restart_rebuilds_the_simulated_host_from_the_database(dev_portal: DevPortal) -> None:
    """The simulation lives in memory; `portal dev` run again on the same file gets its
    clusters and dedicated nodes back from what the database says."""
    client, alice, admin = (dev_portal.client, dev_portal.as_user(DEMO_TENANT_ADMIN),
                            dev_portal.as_user(DEMO_ADMIN))
    dev_portal.converge(1)
    approved_h100_quota(dev_portal)
    assert client.put("/api/v1/nodes/h100-r1-n2/assignment", headers=admin,
                      json={"tenant": "demo"}).status_code == 200
    assert client.post("/api/v1/tenants/demo/clusters", headers=alice,
                       json={"name": "train"}).status_code == 201
    dev_portal.converge()

    restarted = simulated_host_for(dev_portal.settings, simulate=True)
    assert restarted is not None
    with dev_portal.database.transaction() as db:
        check_clusters_on_the_new_host(db)
    worker = build_worker(dev_portal.settings, dev_portal.database, restarted,
                          SimulatedInstaller(restarted))
    for _ in range(6):
        worker.run_pass()

    node = restarted.kube.get("v1", "Node", "h100-r1-n2")
    assert node is not None and "demo" in node["metadata"]["labels"].values()
    assert restarted.kube.get("v1", "Namespace", "t-demo--train") is not None
    with TestClient(create_app(dev_portal.settings, dev_portal.database, restarted)) as again:
        issued = again.post("/api/v1/tenants/demo/clusters/train/kubeconfigs", headers=alice,
                            json={"role": "view"})
    assert issued.status_code == 201, issued.text
    token = yaml.safe_load(issued.text)["users"][0]["user"]["token"]
    assert virtual_cluster(restarted, "t-demo--train", "train").token_valid(token)


SPARE_H100_MAC = "52:54:00:a1:00:02"  # app/devdata/spare-machines.json


def test_a_machine_provisioned_on_the_simulated_host_joins_in_seconds_and_a_stranger_says_why(
        tmp_path: Path, settings: Settings) -> None:
    """`make run` as a newcomer meets it: the worker running, Metal3's steps a second apart."""
    with running_dev_portal(tmp_path, settings, startup_seconds=2.0,
                            worker_poll_seconds=0.2) as portal:
        admin = portal.as_user(DEMO_ADMIN)
        listed = portal.client.get("/admin/machines", headers={"accept": "text/html", **admin})
        assert 'id="simulated-machines"' in listed.text  # which machines answer, at once
        assert SPARE_H100_MAC[:-1] in listed.text and "make lab" in listed.text
        worker = threading.Thread(target=portal.worker.run, daemon=True)
        worker.start()
        try:
            for name, mac in (("spare-1", SPARE_H100_MAC), ("stranger", "0c:c4:7a:12:34:56")):
                registered = portal.client.post("/api/v1/machines", headers=admin, json={
                    "name": name, "host_cluster": "local", "bmc_address":
                    "redfish+https://10.0.4.7/redfish/v1/Systems/1",
                    "bmc": {"username": "admin", "password": "bmc-pa55word"},
                    "boot_mac": mac, "gpu_class": H100, "gpu_count": 8})
                assert registered.status_code == 201, registered.text

            def page(name: str) -> str:
                answer = portal.client.get(f"/admin/machines/{name}",
                                           headers={"accept": "text/html", **admin})
                assert answer.status_code == 200
                return str(answer.text)

            def phase(name: str, wanted: str) -> str | None:
                text = page(name)
                return text if f'class="badge phase-{wanted}"' in text else None

            started = time.monotonic()
            wait_for(lambda: phase("spare-1", "available"), lambda: page("spare-1"))
            print(f"registered to available in {time.monotonic() - started:.1f} s")
            stranger = wait_for(lambda: phase("stranger", "failed"), lambda: page("stranger"))
            assert "no machine answers at boot MAC 0c:c4:7a:12:34:56" in stranger
            assert "52:54:00:a1:00:01 to 52:54:00:a1:00:04" in stranger
            assert "make lab" in stranger

            provisioned = portal.client.post("/api/v1/machines/spare-1/provision",
                                             headers=admin)
            assert provisioned.status_code == 200, provisioned.text
            started = time.monotonic()
            joined = wait_for(lambda: phase("spare-1", "joined"), lambda: page("spare-1"))
            print(f"provisioned to joined in {time.monotonic() - started:.1f} s")
            assert 'href="/admin/nodes/spare-1"' in joined

            def in_inventory() -> dict[str, Any] | None:
                nodes = portal.client.get("/api/v1/nodes", params={"limit": 100},
                                          headers=admin).json()["items"]
                return next((n for n in nodes if n["name"] == "spare-1"), None)

            node = wait_for(in_inventory, "spare-1 in the node inventory")
            assert (node["gpu_class"], node["gpus"], node["ready"]) == (H100, 8, True)
        finally:
            portal.worker.stop()
            worker.join(30)
