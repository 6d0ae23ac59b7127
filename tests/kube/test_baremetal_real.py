"""The Metal3 manifests against a real kube-apiserver with baremetal-operator's own CRD."""

from __future__ import annotations

import base64
import os
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from app.kube.adapter import KubernetesAdapter
from app.kube.errors import PermanentKubeError
from app.kube.manifests.baremetal import (
    BAREMETAL_HOST,
    BOOTSTRAP_KUBECONFIG_PATH,
    MACHINES_NAMESPACE,
    METAL3_API_VERSION,
    USER_DATA_KEY,
    BootstrapToken,
    MachineImage,
    baremetal_host,
    bootstrap_role_bindings,
    bootstrap_token_secret,
    user_data_secret,
    user_data_secret_name,
)
from app.kube.port import register_kind
from tests.support.kube_server import ApiServer, install_crds, skip_unless_ci

pytestmark = pytest.mark.kube_server

IMAGE = MachineImage("https://images.example.com/ubuntu-24.04-gpu.qcow2", "ab" * 32)
CSR_API = "certificates.k8s.io/v1"
register_kind(CSR_API, "CertificateSigningRequest", "certificatesigningrequests", namespaced=False)
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


class BootstrapTokenApiServer(ApiServer):
    """An API server that authenticates bootstrap tokens (kubeadm turns this on; the suite's
    servers do not)."""

    def _spawn(self, binary: str, args: list[str]) -> None:
        if binary == "kube-apiserver":
            args = [*args, "--enable-bootstrap-token-auth"]
        super()._spawn(binary, args)


@pytest.fixture(scope="module")
def joining_api(kube_assets_dir: Path) -> Iterator[ApiServer]:
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None  # noqa: S108 - private mkdtemp
    server = BootstrapTokenApiServer(
        kube_assets_dir, Path(tempfile.mkdtemp(prefix="kube-join-", dir=base)), name="join")
    server.start()
    yield server
    server.stop()


def machine_kubeconfig(api: ApiServer, token: BootstrapToken) -> str:
    """The bootstrap kubeconfig the machine would find on its disk after cloud-init."""
    secret = user_data_secret("gpu-01", server=api.url,
                              ca_data=base64.b64encode(api.ca.cert_pem).decode(),
                              token=token.value, node_name="gpu-01")
    cloud_config = yaml.safe_load(base64.b64decode(secret["data"][USER_DATA_KEY]))
    written = {entry["path"]: entry["content"] for entry in cloud_config["write_files"]}
    return str(written[BOOTSTRAP_KUBECONFIG_PATH])


def refused_within(machine: KubernetesAdapter, seconds: float) -> int | None:
    """The status the API server refuses the machine with, once it does: it caches a token's
    authentication for a few seconds, so a deleted token dies within that time, not at once."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            machine.list(CSR_API, "CertificateSigningRequest")
        except PermanentKubeError as refused:
            return refused.status
        time.sleep(0.5)
    return None


def test_the_machines_kubeconfig_may_bootstrap_a_kubelet_until_its_token_is_deleted(
    joining_api: ApiServer,
) -> None:
    token = BootstrapToken("join01", "0123456789abcdef")
    admin = joining_api.adapter()
    machine = KubernetesAdapter.from_kubeconfig_yaml(machine_kubeconfig(joining_api, token))
    try:
        for binding in bootstrap_role_bindings():
            admin.apply(binding)
        admin.apply(bootstrap_token_secret("gpu-01", token,
                                           datetime.now(UTC) + timedelta(hours=1)))

        assert machine.list(CSR_API, "CertificateSigningRequest") == []

        admin.delete("v1", "Secret", "bootstrap-token-join01", "kube-system")
        assert refused_within(machine, seconds=30) == 401
    finally:
        machine.close()
        admin.close()


def test_an_expired_bootstrap_token_is_refused(joining_api: ApiServer) -> None:
    token = BootstrapToken("join02", "0123456789abcdef")
    admin = joining_api.adapter()
    machine = KubernetesAdapter.from_kubeconfig_yaml(machine_kubeconfig(joining_api, token))
    try:
        for binding in bootstrap_role_bindings():
            admin.apply(binding)
        admin.apply(bootstrap_token_secret("gpu-01", token,
                                           datetime.now(UTC) - timedelta(minutes=1)))

        with pytest.raises(PermanentKubeError) as refused:
            machine.list(CSR_API, "CertificateSigningRequest")
        assert refused.value.status == 401
    finally:
        machine.close()
        admin.close()
