"""Metal3's real baremetal-operator (fixture provisioner, no Ironic) against the suite's real
API server: the states a BareMetalHost goes through and where a BMC problem shows."""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.kube.adapter import KubernetesAdapter
from app.kube.port import Manifest
from app.lab.metal3 import BareMetalOperator
from tests.support.kube_server import ApiServer
from tests.support.metal3 import (
    bare_metal_host,
    baremetal_operator,
    bmc_secret,
    provisioning_state,
    recorded_states,
    wait_for_host,
)

pytestmark = pytest.mark.kube_server
IMAGE = {"url": "http://images.lab/ubuntu-24.04-gpu.qcow2",
         "checksum": "http://images.lab/ubuntu-24.04-gpu.qcow2.sha256sum",
         "checksumType": "sha256", "format": "qcow2"}


@pytest.fixture(scope="module")
def namespace() -> str:
    return f"metal3-{secrets.token_hex(3)}"


@pytest.fixture(scope="module")
def operator(host_api: ApiServer, namespace: str) -> Iterator[BareMetalOperator]:
    with tempfile.TemporaryDirectory(prefix="metal3-") as workdir, \
            baremetal_operator(host_api, Path(workdir), namespace) as running:
        yield running


@pytest.fixture
def admin(host_api: ApiServer) -> Iterator[KubernetesAdapter]:
    adapter = host_api.adapter()
    yield adapter
    adapter.close()


def in_state(state: str) -> Callable[[Manifest], bool]:
    return lambda host: provisioning_state(host) == state


def status(host: Manifest) -> dict[str, Any]:
    return dict(host.get("status") or {})


def test_a_host_is_registered_inspected_provisioned_and_deprovisioned(
        host_api: ApiServer, operator: BareMetalOperator, admin: KubernetesAdapter,
        namespace: str) -> None:
    admin.apply(bmc_secret("gpu-01-bmc", namespace))
    registered = bare_metal_host("gpu-01", namespace, mac="52:54:00:00:01:01",
                                 credentials="gpu-01-bmc")
    with recorded_states(host_api, "gpu-01", namespace) as states:
        admin.apply(registered)
        available = wait_for_host(admin, operator, "gpu-01", namespace, in_state("available"),
                                  "became available")
        assert status(available)["operationalStatus"] == "OK"
        assert status(available)["hardware"]["cpu"]["arch"] == "x86_64"

        admin.apply({"apiVersion": "v1", "kind": "Secret",
                     "metadata": {"name": "gpu-01-user-data", "namespace": namespace},
                     "stringData": {"userData": "#cloud-config\nwrite_files: []\n"}})
        provisioning = {**registered["spec"], "online": True, "image": IMAGE,
                        "userData": {"name": "gpu-01-user-data", "namespace": namespace}}
        admin.apply({**registered, "spec": provisioning})
        provisioned = wait_for_host(admin, operator, "gpu-01", namespace,
                                    in_state("provisioned"), "was provisioned")
        assert status(provisioned)["provisioning"]["image"]["url"] == IMAGE["url"]

        admin.apply(registered)
        wait_for_host(admin, operator, "gpu-01", namespace, in_state("available"),
                      "was deprovisioned back to available")
    assert states == ["registering", "inspecting", "preparing", "available", "provisioning",
                      "provisioned", "deprovisioning", "available"]


def test_a_missing_bmc_secret_shows_as_a_registration_error_until_it_exists(
        operator: BareMetalOperator, admin: KubernetesAdapter, namespace: str) -> None:
    host = bare_metal_host("gpu-02", namespace, mac="52:54:00:00:01:02",
                           credentials="gpu-02-bmc")
    admin.apply(host)
    failed = wait_for_host(admin, operator, "gpu-02", namespace,
                           lambda h: status(h).get("operationalStatus") == "error",
                           "reported an error")
    assert provisioning_state(failed) == "registering"
    assert status(failed)["errorType"] == "registration error"
    assert "gpu-02-bmc does not exist" in str(status(failed)["errorMessage"])

    admin.apply(bmc_secret("gpu-02-bmc", namespace))
    # A new Secret is not yet the host's (the operator claims it on reading it): the host is
    # retried after its error backoff (minutes), or at once when the host itself changes.
    admin.apply({**host, "metadata": {**host["metadata"],
                                      "annotations": {"lab/credentials-fixed": "1"}}})
    recovered = wait_for_host(admin, operator, "gpu-02", namespace, in_state("available"),
                              "recovered")
    assert status(recovered)["operationalStatus"] == "OK"
    assert not status(recovered).get("errorType")
