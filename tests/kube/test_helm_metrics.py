"""A helm install's duration by its host cluster (``portal_helm_install_duration_seconds``): the
worker's metrics show how long installs take on each host, failed ones included."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from app.kube.connector import HostTarget
from app.kube.helm import HelmInstaller, InstallError

KUBECONFIG = "apiVersion: v1\nkind: Config\n"


def installs(host: str) -> float:
    return REGISTRY.get_sample_value(
        "portal_helm_install_duration_seconds_count", {"host": host}) or 0.0


def helm(program: str) -> HelmInstaller:
    """helm played by ``true`` or ``false``: an install that succeeds or fails at once."""
    return HelmInstaller(binary=program, chart_repo="https://charts.loft.sh",
                         chart_version="0.30.0", kubeconfig=None)


@pytest.mark.parametrize(("program", "host_id"), [("true", 9101), ("false", 9102)])
def test_each_install_on_a_host_is_timed_under_its_id(program: str, host_id: int) -> None:
    before = installs(str(host_id))
    installer = helm(program).for_host(HostTarget(host_id=host_id, name="gpu-east",
                                                  kubeconfig_yaml=KUBECONFIG))
    for _ in range(2):
        try:
            installer.install("vc-train", "t-acme-train", "controlPlane: {}\n")
        except InstallError:
            assert program == "false"
    assert installs(str(host_id)) - before == 2


def test_a_host_on_the_environments_credentials_is_timed_under_its_id_too() -> None:
    helm("true").for_host(HostTarget(host_id=9103, name="local")).install(
        "vc-train", "t-acme-train", "{}\n")
    assert installs("9103") == 1
