"""The Metal3 manifests against a real kube-apiserver with baremetal-operator's own CRD."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.kube.adapter import KubernetesAdapter
from app.kube.errors import PermanentKubeError
from app.kube.manifests.baremetal import (
    BAREMETAL_HOST,
    MACHINES_NAMESPACE,
    METAL3_API_VERSION,
    BootstrapToken,
    MachineImage,
    baremetal_host,
    bootstrap_role_bindings,
    bootstrap_token_secret,
    user_data_secret_name,
)
from tests.support.kube_server import ApiServer, install_crds, skip_unless_ci

pytestmark = pytest.mark.kube_server

IMAGE = MachineImage("https://images.example.com/ubuntu-24.04-gpu.qcow2", "ab" * 32)
BMC = "redfish-virtualmedia+https://10.0.0.21/redfish/v1/Systems/1"


def metal3_crds() -> Path:
    folder = Path(os.environ.get("PORTAL_METAL3_CRDS", ".cache/metal3-crds"))
    crd = folder / "metal3.io_baremetalhosts.yaml"
    if not crd.is_file():
        skip_unless_ci("baremetal-operator's CRDs are not in PORTAL_METAL3_CRDS "
                       "(.cache/metal3-crds by default)")
    return crd


@pytest.fixture(scope="module")
def metal3_host(host_api: ApiServer) -> ApiServer:
    crd = metal3_crds()
    adapter = host_api.adapter()
    try:
        install_crds(adapter, crd)
        adapter.apply({"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": MACHINES_NAMESPACE}})
    finally:
        adapter.close()
    return host_api


@pytest.fixture
def admin(metal3_host: ApiServer) -> Iterator[KubernetesAdapter]:
    adapter = metal3_host.adapter()
    yield adapter
    adapter.close()


@pytest.mark.parametrize("image", [IMAGE, None])
def test_the_crd_keeps_every_field_of_the_host_as_built(admin: KubernetesAdapter,
                                           image: MachineImage | None) -> None:
    user_data = user_data_secret_name("gpu-01") if image else None
    host = baremetal_host("gpu-01", bmc_address=BMC, boot_mac="52:54:00:aa:bb:01", online=True,
                          image=image, user_data=user_data)

    stored = admin.dry_run_apply(host)

    # The schema prunes fields it does not know: a misspelt one would be missing here.
    assert {key: stored["spec"].get(key) for key in host["spec"]} == host["spec"]


def test_the_crd_refuses_an_image_format_it_does_not_know(admin: KubernetesAdapter) -> None:
    host = baremetal_host("gpu-01", bmc_address=BMC, boot_mac="52:54:00:aa:bb:01", online=True,
                          image=IMAGE, user_data=None)
    host["spec"]["image"]["format"] = "iso"  # what MachineImage refuses, to show the CRD would

    with pytest.raises(PermanentKubeError, match="format"):
        admin.dry_run_apply(host)


def test_host_round_trips_through_the_real_api(admin: KubernetesAdapter) -> None:
    host = baremetal_host("gpu-02", bmc_address=BMC, boot_mac="52:54:00:aa:bb:02", online=False,
                          image=None, user_data=None)
    try:
        admin.apply(host)
        listed = admin.list(METAL3_API_VERSION, BAREMETAL_HOST, MACHINES_NAMESPACE)
        assert "gpu-02" in [h["metadata"]["name"] for h in listed]
    finally:
        assert admin.delete(METAL3_API_VERSION, BAREMETAL_HOST, "gpu-02", MACHINES_NAMESPACE)


def test_bootstrap_token_and_its_bindings_are_accepted(admin: KubernetesAdapter) -> None:
    token = BootstrapToken("abc123", "0123456789abcdef")
    secret = bootstrap_token_secret("gpu-01", token, datetime.now(UTC) + timedelta(hours=1))

    assert admin.dry_run_apply(secret)["type"] == "bootstrap.kubernetes.io/token"
    for binding in bootstrap_role_bindings():
        assert admin.dry_run_apply(binding)["roleRef"] == binding["roleRef"]
