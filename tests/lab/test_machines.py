"""The lab's machines booting: the user data a machine boots from, its bootstrap token checked
by a real API server, and the play following the real baremetal-operator's hosts."""

from __future__ import annotations

import base64
import secrets
import signal
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.kube.adapter import KubernetesAdapter
from app.kube.errors import KubeError
from app.kube.manifests import labels as lbl
from app.kube.port import Manifest
from app.lab import demo
from app.lab.machines import (
    BOOTSTRAP_KUBECONFIG,
    BOOTSTRAPPERS,
    KUBELET_DEFAULTS,
    LAB_HARDWARE,
    MACHINES_NAMESPACE,
    BootConfig,
    BootError,
    MachineBoots,
    boot_config,
    bootstrap_rbac,
    join,
)
from app.lab.main import Lab
from app.lab.metal3 import METAL3_API
from tests.lab import groups
from tests.support.kube_server import ApiServer
from tests.support.metal3 import (
    bare_metal_host,
    baremetal_operator,
    bmc_secret,
    provisioning_state,
    wait_for_host,
)
from tests.support.waiting import wait_for

pytestmark = groups.TEAMS

H100_MAC = "52:54:00:a1:00:01"
H100 = "NVIDIA-H100-80GB-HBM3"
IMAGE = {"url": "http://images.lab/gpu-node.qcow2", "checksum": "0" * 64,
         "checksumType": "sha256", "format": "qcow2"}


def cloud_config(kubeconfig: str, host: str, node: str, *, encode: bool = False) -> str:
    kubeconfig_file = ({"path": BOOTSTRAP_KUBECONFIG, "encoding": "b64",
                        "content": base64.b64encode(kubeconfig.encode()).decode()} if encode
                       else {"path": BOOTSTRAP_KUBECONFIG, "content": kubeconfig})
    arguments = f"--provider-id=metal3://portal-machines/{host} --hostname-override={node}"
    return "#cloud-config\n" + yaml.safe_dump({"write_files": [
        kubeconfig_file,
        {"path": KUBELET_DEFAULTS, "content": f'KUBELET_EXTRA_ARGS="{arguments}"\n'},
    ]})


def bootstrap_token(expires_in: timedelta) -> tuple[Manifest, str]:
    token_id, token_secret = secrets.token_hex(3), secrets.token_hex(8)
    expiration = (datetime.now(UTC) + expires_in).strftime("%Y-%m-%dT%H:%M:%SZ")
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
              "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"},
              "stringData": {"token-id": token_id, "token-secret": token_secret,
                             "expiration": expiration,
                             "usage-bootstrap-authentication": "true",
                             "auth-extra-groups": BOOTSTRAPPERS}}
    return secret, f"{token_id}.{token_secret}"


# ----- the user data


def test_the_kubelet_files_are_read_from_the_cloud_config_plain_or_base64() -> None:
    for encode in (False, True):
        config = boot_config(cloud_config("apiVersion: v1\nkind: Config\n", "gpu-07", "node-7",
                                          encode=encode))
        assert config == BootConfig("apiVersion: v1\nkind: Config\n",
                                    "metal3://portal-machines/gpu-07", "node-7")


@pytest.mark.parametrize(("user_data", "says"), [
    ("#!/bin/sh\necho hi\n", "not a #cloud-config"),
    ("#cloud-config\nwrite_files: []\n", BOOTSTRAP_KUBECONFIG),
    ("#cloud-config\nwrite_files:\n- path: /etc/kubernetes/bootstrap-kubelet.conf\n"
     "  content: x\n", "--provider-id"),
])
def test_user_data_a_machine_cannot_boot_from_says_what_is_missing(user_data: str,
                                                                   says: str) -> None:
    with pytest.raises(BootError, match=says):
        boot_config(user_data)


# ----- the token, checked by a real API server


@pytest.fixture
def admin(host_api: ApiServer) -> Iterator[KubernetesAdapter]:
    adapter = host_api.adapter()
    for obj in bootstrap_rbac():
        adapter.apply(obj, force=True)
    yield adapter
    adapter.close()


def joins(server: ApiServer, admin: KubernetesAdapter, token: str, node: str) -> bool:
    """Whether the machine's Node was made; a refusal must be the token's (401)."""
    kubeconfig = server.kubeconfig_for(token=token)
    config = boot_config(cloud_config(kubeconfig, node, node))
    try:
        join(config, LAB_HARDWARE[H100_MAC])
    except KubeError as error:
        refused_status = error.status
    else:
        refused_status = None
    assert refused_status in (None, 401)
    return refused_status is None and admin.get("v1", "Node", node) is not None


def test_a_machine_joins_with_a_live_bootstrap_token_and_not_with_an_expired_or_unknown_one(
        host_api: ApiServer, admin: KubernetesAdapter) -> None:
    live, live_token = bootstrap_token(timedelta(minutes=10))
    expired, expired_token = bootstrap_token(timedelta(minutes=-1))
    admin.apply(live)
    admin.apply(expired)
    names = [f"bootstrap-{secrets.token_hex(3)}-{n}" for n in range(3)]
    try:
        assert joins(host_api, admin, live_token, names[0])
        node = admin.get("v1", "Node", names[0]) or {}
        assert node["spec"]["providerID"] == f"metal3://portal-machines/{names[0]}"
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
        assert not joins(host_api, admin, expired_token, names[1])
        assert not joins(host_api, admin, "abcdef.0123456789abcdef", names[2])
    finally:
        for name in names:
            admin.delete("v1", "Node", name)
        for secret in (live, expired):
            admin.delete("v1", "Secret", secret["metadata"]["name"], "kube-system")


# ----- the play, with the real baremetal-operator


def test_a_provisioned_host_boots_into_a_node_which_goes_when_it_is_deprovisioned(
        host_api: ApiServer, admin: KubernetesAdapter) -> None:
    namespace = f"machines-{secrets.token_hex(3)}"
    token_secret, token = bootstrap_token(timedelta(minutes=10))
    admin.apply(token_secret)
    host_name, node = "gpu-h100-01", f"m-{secrets.token_hex(3)}"
    user_data = cloud_config(host_api.kubeconfig_for(token=token), host_name, node).replace(
        "portal-machines", namespace)
    play = MachineBoots(admin, namespace)
    with tempfile.TemporaryDirectory(prefix="metal3-") as workdir, \
            baremetal_operator(host_api, Path(workdir), namespace) as operator:
        admin.apply(bmc_secret("gpu-h100-01-bmc", namespace))
        admin.apply({"apiVersion": "v1", "kind": "Secret",
                     "metadata": {"name": "gpu-h100-01-user-data", "namespace": namespace},
                     "stringData": {"userData": user_data}})
        registered = bare_metal_host(host_name, namespace, mac=H100_MAC,
                                     credentials="gpu-h100-01-bmc")
        admin.apply({**registered, "spec": {
            **registered["spec"], "online": True, "image": IMAGE,
            "userData": {"name": "gpu-h100-01-user-data", "namespace": namespace}}})
        play.step()
        assert admin.get("v1", "Node", node) is None, "a Node before the machine is provisioned"
        wait_for_host(admin, operator, host_name, namespace,
                      lambda h: provisioning_state(h) == "provisioned", "was provisioned")
        play.step()
        joined = admin.get("v1", "Node", node) or {}
        assert joined["spec"]["providerID"] == f"metal3://{namespace}/{host_name}", play.problems

        def node_gone() -> bool:
            play.step()
            return admin.get("v1", "Node", node) is None

        admin.apply(registered)
        wait_for(node_gone, "the Node to go once the host is deprovisioning")
    admin.delete("v1", "Secret", token_secret["metadata"]["name"], "kube-system")


# ----- in the lab


def test_in_the_lab_a_provisioned_machine_becomes_a_ready_gpu_node_and_leaves_on_release(
        lab: Lab) -> None:
    token_secret, token = bootstrap_token(timedelta(minutes=10))
    lab.host.apply(token_secret)
    host_name, node = "lab-h100-01", "lab-h100-01"
    user_data = cloud_config(lab.server.kubeconfig_for(token=token), host_name, node)
    lab.host.apply(bmc_secret("lab-h100-01-bmc", MACHINES_NAMESPACE))
    lab.host.apply({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "lab-h100-01-user-data",
                                 "namespace": MACHINES_NAMESPACE},
                    "stringData": {"userData": user_data}})
    registered = bare_metal_host(host_name, MACHINES_NAMESPACE, mac=H100_MAC,
                                 credentials="lab-h100-01-bmc")
    lab.host.apply({**registered, "spec": {
        **registered["spec"], "online": True, "image": IMAGE,
        "userData": {"name": "lab-h100-01-user-data", "namespace": MACHINES_NAMESPACE}}})

    def ready() -> bool:
        conditions = ((lab.host.get("v1", "Node", node) or {}).get("status") or {}).get(
            "conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    wait_for(ready, "the provisioned machine's Node to be Ready", timeout=60)
    lab.host.apply(registered)
    wait_for(lambda: lab.host.get("v1", "Node", node) is None,
             "the deprovisioned machine's Node to go", timeout=60)
    lab.host.delete("v1", "Secret", token_secret["metadata"]["name"], "kube-system")


# ----- in the lab, driven by the portal


MACHINE = "lab-h100-02"
MACHINE_MAC = "52:54:00:a1:00:02"
MACHINE_TENANT = "orbital"


def machine_phase(portal: demo.Portal, phase: str) -> Callable[[], dict[str, Any] | None]:
    def probe() -> dict[str, Any] | None:
        machine: dict[str, Any] = portal.call("GET", f"/machines/{MACHINE}")
        return machine if machine["phase"] == phase else None
    return probe


def host_of(lab: Lab) -> Manifest | None:
    return lab.host.get(METAL3_API, "BareMetalHost", MACHINE, MACHINES_NAMESPACE)


def machine_tokens(lab: Lab) -> list[Manifest]:
    """The bootstrap tokens the portal minted for the machine, on the host."""
    return [s for s in lab.host.list("v1", "Secret", "kube-system")
            if s.get("type") == "bootstrap.kubernetes.io/token"
            and (s["metadata"].get("labels") or {}).get(lbl.MACHINE) == MACHINE]


def test_the_portal_takes_a_machine_from_its_bmc_to_a_dedicated_gpu_node_and_back_to_the_pool(
        lab: Lab) -> None:
    portal = demo.Portal(lab.portal_url, lab.admin_token)
    host_cluster = portal.call("GET", "/host-clusters")["items"][0]["name"]
    portal.call("POST", "/machines", {
        "name": MACHINE, "host_cluster": host_cluster,
        "bmc_address": "redfish+https://10.214.250.2/redfish/v1/Systems/1",
        "bmc": {"username": "root", "password": "calvin-lab"}, "boot_mac": MACHINE_MAC,
        "gpu_class": H100, "gpu_count": 8, "rack": "rack-5"})
    available = wait_for(machine_phase(portal, "available"),
                         "Metal3 to register and inspect the machine", timeout=120)
    assert available["provisioning_state"] == "available"
    assert available["node_name"] is None

    portal.call("POST", f"/machines/{MACHINE}/provision")
    wait_for(lambda: ((host_of(lab) or {}).get("spec") or {}).get("image"),
             "the worker to give the BareMetalHost its image", timeout=60)
    # The worker (and the web) die while Metal3 provisions; the machine still joins.
    lab.processes["portal"].send_signal(signal.SIGKILL)
    lab.processes["portal"].wait()
    lab.restart("portal")
    joined = wait_for(machine_phase(portal, "joined"),
                      "the machine to boot and its Node to be Ready", timeout=180)
    assert joined["node_name"] == MACHINE and joined["reason"] == "", joined
    assert len(machine_tokens(lab)) == 1, "one live bootstrap token per provisioned machine"

    node = wait_for(lambda: _inventoried(portal), "the GPU inventory to take the new node",
                    timeout=90)
    assert (node["gpu_class"], node["gpus"], node["rack"], node["ready"]) == (
        H100, 8, "rack-5", True)

    portal.call("POST", "/tenants", {"slug": MACHINE_TENANT, "display_name": "Orbital"},
                accept=frozenset({409}))
    request = portal.call("POST", f"/tenants/{MACHINE_TENANT}/quota-requests", {
        "gpu_class_id": portal.class_id(H100), "gpus": 8, "reason": "a machine of its own"})
    portal.call("POST", f"/quota-requests/{request['id']}/approve", {})
    portal.call("PUT", f"/nodes/{MACHINE}/assignment", {"tenant": MACHINE_TENANT})
    assert portal.call("GET", f"/machines/{MACHINE}")["tenant"] == MACHINE_TENANT
    refused = portal.client.post(f"/api/v1/machines/{MACHINE}/release")
    assert refused.status_code == 409 and MACHINE_TENANT in refused.text
    portal.call("DELETE", f"/nodes/{MACHINE}/assignment")

    portal.call("POST", f"/machines/{MACHINE}/release")
    back = wait_for(machine_phase(portal, "available"),
                    "Metal3 to deprovision the machine back into the pool", timeout=120)
    assert back["node_name"] is None and back["tenant"] is None
    wait_for(lambda: lab.host.get("v1", "Node", MACHINE) is None,
             "the released machine's Node to leave the host", timeout=60)
    wait_for(lambda: portal.call("GET", f"/nodes/{MACHINE}")["gone_at"],
             "the inventory to mark the node gone", timeout=90)
    assert not machine_tokens(lab)

    portal.call("DELETE", f"/machines/{MACHINE}")
    wait_for(lambda: portal.call("GET", f"/machines/{MACHINE}", accept=frozenset({404})) is None
             and host_of(lab) is None, "the machine and its BareMetalHost to go", timeout=90)


def _inventoried(portal: demo.Portal) -> dict[str, Any] | None:
    node: dict[str, Any] | None = portal.call("GET", f"/nodes/{MACHINE}", accept=frozenset({404}))
    return node if node and node["ready"] and node["gpus"] else None


def test_bmc_credentials_emptied_on_the_host_are_written_back_and_metal3_recovers(
        lab: Lab) -> None:
    """With the fixture provisioner Metal3's only BMC error is a credentials Secret it cannot
    use; the portal writes its own back on its next pass (that Metal3's errors become the
    machine's reason is tests/reconcilers/test_machines.py's, on their real shape)."""
    portal = demo.Portal(lab.portal_url, lab.admin_token)
    name = "lab-l40s-01"
    portal.call("POST", "/machines", {
        "name": name, "host_cluster": portal.call("GET", "/host-clusters")["items"][0]["name"],
        "bmc_address": "ipmi://10.214.250.3:623", "bmc": {"username": "ADMIN", "password": "x"},
        "boot_mac": "52:54:00:b1:00:01", "gpu_class": "NVIDIA-L40S", "gpu_count": 4})

    def available() -> bool:
        return bool(portal.call("GET", f"/machines/{name}")["phase"] == "available")

    wait_for(available, "the machine to be available", timeout=120)
    # Someone empties the BMC Secret on the host, taking its fields over.
    lab.host.apply({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": f"{name}-bmc", "namespace": MACHINES_NAMESPACE},
                    "data": {"username": "", "password": ""}}, force=True, manager="someone")
    wait_for(lambda: any(e.get("reason") == "BMCCredentialError"
                         and e["involvedObject"]["name"] == name
                         for e in lab.host.list("v1", "Event", MACHINES_NAMESPACE)),
             "Metal3 to refuse the emptied credentials", timeout=60)

    def credentials_back() -> bool:
        secret = lab.host.get("v1", "Secret", f"{name}-bmc", MACHINES_NAMESPACE) or {}
        return base64.b64decode((secret.get("data") or {}).get("username") or "") == b"ADMIN"

    wait_for(credentials_back, "the portal to write the credentials back", timeout=60)
    wait_for(lambda: _error_cleared(lab, name) and available(),
             "Metal3 to take the credentials again", timeout=60)
    portal.call("DELETE", f"/machines/{name}")
    wait_for(lambda: portal.call("GET", f"/machines/{name}", accept=frozenset({404})) is None,
             "the machine to go", timeout=90)


def _error_cleared(lab: Lab, name: str) -> bool:
    host = lab.host.get(METAL3_API, "BareMetalHost", name, MACHINES_NAMESPACE) or {}
    return not (host.get("status") or {}).get("errorMessage")
