"""The simulated host of ``portal dev``: a control plane boots over ``startup_seconds``."""

from __future__ import annotations

import base64

import yaml

from app.kube.simulated import SIMULATED_DOMAIN, SimulatedHost, demo_nodes

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
