"""The simulated host of ``portal dev``: a control plane boots over ``startup_seconds``; its
Metal3 takes a spare machine through its states a step (half of that) apart, boots it with the
user data the worker wrote, and says which machines answer when none does."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from app.kube.manifests import baremetal as metal3
from app.kube.simulated import SIMULATED_DOMAIN, SimulatedHost, demo_nodes
from app.machines.join import CLUSTER_INFO, CLUSTER_INFO_NAMESPACE, from_cluster_info

NAMESPACE = "t-demo--train"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def booting(startup_seconds: float = 8.0) -> tuple[SimulatedHost, Clock]:
    clock = Clock()
    host = SimulatedHost(demo_nodes(), startup_seconds=startup_seconds, clock=clock)
    host.start_control_plane("train", NAMESPACE)
    return host, clock


def admin_kubeconfig(host: SimulatedHost) -> str | None:
    secret = host.host().get("v1", "Secret", "vc-train", NAMESPACE)
    return base64.b64decode(secret["data"]["config"]).decode() if secret else None


def test_the_control_plane_exports_its_kubeconfig_halfway_and_answers_readyz_when_up() -> None:
    host, clock = booting(8.0)
    assert host.host().get("apps/v1", "StatefulSet", "train", NAMESPACE) is not None
    assert admin_kubeconfig(host) is None
    clock.now += 4.0
    config = admin_kubeconfig(host)
    assert config is not None
    assert not host.ready(config)
    clock.now += 4.0
    assert host.ready(config)


def test_its_server_never_resolves() -> None:
    host, _ = booting(0.0)
    config = yaml.safe_load(admin_kubeconfig(host) or "")
    assert config["clusters"][0]["cluster"]["server"] == f"https://{NAMESPACE}.{SIMULATED_DOMAIN}"


def test_an_upgrade_keeps_the_running_control_plane_and_what_it_holds() -> None:
    host, _ = booting(0.0)
    config = admin_kubeconfig(host) or ""
    virtual = host.virtual(config)
    virtual.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "work"}})
    host.start_control_plane("train", NAMESPACE)
    assert host.virtual(config).get("v1", "Namespace", "work") is not None
    assert host.ready(config)


def test_uninstall_stops_it_and_a_reinstall_boots_a_fresh_one() -> None:
    host, clock = booting(2.0)
    clock.now += 2.0
    config = admin_kubeconfig(host) or ""
    host.virtual(config).apply({"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": "work"}})
    host.stop_control_plane("train", NAMESPACE)
    assert host.host().get("apps/v1", "StatefulSet", "train", NAMESPACE) is None
    assert admin_kubeconfig(host) is None
    assert not host.ready(config)
    host.start_control_plane("train", NAMESPACE)
    clock.now += 2.0
    assert host.ready(config)
    assert host.virtual(config).get("v1", "Namespace", "work") is None


# ----- Metal3 on the simulated host

MACHINE = "gpu-r5-01"
H100_MAC = "52:54:00:a1:00:01"
BMH = (metal3.METAL3_API_VERSION, metal3.BAREMETAL_HOST)
IMAGE = metal3.MachineImage("https://images.example.com/ubuntu.qcow2", "abc123")


class Machines:
    """The simulated host with the worker's writes of one machine, done by hand."""

    def __init__(self, mac: str = H100_MAC) -> None:
        self.clock = Clock()
        self.host = SimulatedHost(demo_nodes(), startup_seconds=8.0, clock=self.clock)
        self.kube = self.host.host()
        self.mac = mac
        self.kube.apply({"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": metal3.MACHINES_NAMESPACE}})
        self.bare_metal_host(image=False)

    def bare_metal_host(self, *, image: bool, token: str | None = None) -> None:
        user_data = None
        if token is not None:
            endpoint = from_cluster_info(self.kube.get("v1", "ConfigMap", CLUSTER_INFO,
                                                       CLUSTER_INFO_NAMESPACE))
            assert endpoint is not None  # published, as kubeadm does
            self.kube.apply(metal3.user_data_secret(MACHINE, server=endpoint.server,
                                                    ca_data=endpoint.ca_data, token=token,
                                                    node_name=MACHINE))
            user_data = metal3.user_data_secret_name(MACHINE)
        self.kube.apply(metal3.baremetal_host(
            MACHINE, bmc_address="redfish+http://10.0.0.9/redfish/v1/Systems/1",
            boot_mac=self.mac, online=True, image=IMAGE if image else None,
            user_data=user_data))

    def token(self, *, expires_in: timedelta = timedelta(hours=1)) -> str:
        token = metal3.BootstrapToken("abcdef", "0123456789abcdef")
        self.kube.apply(metal3.bootstrap_token_secret(MACHINE, token,
                                                      datetime.now(UTC) + expires_in))
        return token.value

    def after(self, seconds: float) -> metal3.HostObservation:
        self.clock.now += seconds
        self.host.host()
        return metal3.host_observation(self.kube.get(*BMH, MACHINE, metal3.MACHINES_NAMESPACE))

    def node(self) -> dict[str, Any] | None:
        return self.kube.get("v1", "Node", MACHINE)


def test_a_spare_machine_is_registered_inspected_and_available_a_step_apart() -> None:
    machines = Machines()
    assert [machines.after(seconds).state for seconds in (0.0, 3.9, 0.1, 4.0, 60.0)] == [
        "registering", "registering", "inspecting", "available", "available"]


def test_provisioned_with_its_user_data_it_boots_and_joins_as_a_node_like_the_fleets() -> None:
    machines = Machines()
    machines.after(8.0)
    machines.bare_metal_host(image=True, token=machines.token())
    assert machines.after(0.0).state == "provisioning"
    observed = machines.after(4.0)
    assert (observed.state, observed.provisioned) == ("provisioned", True)
    assert machines.node() is None  # booting
    machines.after(4.0)
    node = machines.node()
    assert node is not None
    assert node["spec"]["providerID"] == metal3.provider_id(MACHINE)
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert node["metadata"]["labels"]["network.topology.example.com/rack"] == "rack-5"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"

    machines.bare_metal_host(image=False)  # released
    assert machines.after(0.0).state == "deprovisioning"
    assert machines.node() is None  # its disk is being wiped
    observed = machines.after(4.0)
    assert (observed.state, observed.in_pool) == ("available", True)


def test_a_machine_whose_bootstrap_token_the_host_does_not_know_joins_nothing() -> None:
    machines = Machines()
    machines.after(8.0)
    machines.token(expires_in=timedelta(seconds=-1))
    machines.bare_metal_host(image=True, token="abcdef.0123456789abcdef")
    machines.after(0.0)
    assert machines.after(4.0).state == "provisioned"
    machines.after(60.0)
    assert machines.node() is None


def test_a_boot_mac_no_spare_answers_at_fails_registration_saying_which_do() -> None:
    observed = Machines(mac="0c:c4:7a:12:34:56").after(4.0)
    assert (observed.state, observed.error_type) == ("registering", "registration error")
    assert "no machine answers at boot MAC 0c:c4:7a:12:34:56" in observed.error_message
    assert ("52:54:00:a1:00:01 to 52:54:00:a1:00:04 (8 NVIDIA-H100-80GB-HBM3 GPUs each)"
            in observed.error_message)
    assert "make lab" in observed.error_message
