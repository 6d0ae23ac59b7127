"""Metal3 manifests of a bare-metal machine, the cloud-config that joins it, and how a
BareMetalHost's status is read.

UPDATE_GOLDEN=1 rewrites tests/kube/golden/baremetal.*.yaml from the current builders.
"""

from __future__ import annotations

import base64
import os
import random
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.kube.adapter import KubernetesAdapter
from app.kube.manifests import dump_yaml
from app.kube.manifests import labels as lbl
from app.kube.manifests.baremetal import (
    BAREMETAL_HOST,
    BOOTSTRAP_GROUP,
    BOOTSTRAP_KUBECONFIG_PATH,
    KUBELET_DEFAULTS_PATH,
    MACHINES_NAMESPACE,
    METAL3_API_VERSION,
    USER_DATA_KEY,
    BootstrapToken,
    MachineImage,
    ProvisioningState,
    baremetal_host,
    bmc_secret,
    bootstrap_role_bindings,
    bootstrap_token_secret,
    check_machine_name,
    cloud_config,
    host_observation,
    provider_id,
    user_data_secret,
    user_data_secret_name,
)
from app.kube.memory import InMemoryKube

GOLDEN = Path(__file__).parent / "golden"
TOKEN = BootstrapToken("abc123", "0123456789abcdef")
EXPIRES = datetime(2026, 12, 2, 20, 30, tzinfo=UTC)
SERVER = "https://host.example.com:6443"
CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
CA_DATA = base64.b64encode(CA_PEM).decode()
IMAGE = MachineImage("https://images.example.com/ubuntu-24.04-gpu.qcow2", "ab" * 32)
BMC = "redfish-virtualmedia+https://10.0.0.21/redfish/v1/Systems/1"
MAC = "52:54:00:aa:bb:01"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text()


def decoded(secret: dict[str, Any]) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}


def provisioning_host(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"bmc_address": BMC, "boot_mac": MAC, "online": True,
                              "image": IMAGE, "user_data": user_data_secret_name("gpu-01")}
    return baremetal_host("gpu-01", **{**fields, **overrides})


def pooled_host(**overrides: Any) -> dict[str, Any]:
    return provisioning_host(image=None, user_data=None, **overrides)


def joining_user_data(machine: str = "gpu-01", node_name: str = "gpu-01") -> dict[str, Any]:
    return user_data_secret(machine, server=SERVER, ca_data=CA_DATA, token=TOKEN.value,
                            node_name=node_name)


def written_files(cloud_config_text: str) -> dict[str, dict[str, Any]]:
    document = yaml.safe_load(cloud_config_text)
    return {entry["path"]: entry for entry in document["write_files"]}


# ----- goldens


def test_golden_machine_objects() -> None:
    objects = [bmc_secret("gpu-01", "admin", "s3cret"),
               bootstrap_token_secret("gpu-01", TOKEN, EXPIRES),
               joining_user_data(), provisioning_host(), *bootstrap_role_bindings()]
    check_golden("baremetal.objects.yaml", "---\n".join(map(dump_yaml, objects)))


def test_golden_cloud_config() -> None:
    text = cloud_config("gpu-01", server=SERVER, ca_data=CA_DATA, token=TOKEN.value,
                        node_name="gpu-01")
    check_golden("baremetal.cloud-config.yaml", text)


# ----- Secrets


def test_bmc_secret_holds_the_credentials_under_the_keys_the_operator_reads() -> None:
    secret = bmc_secret("gpu-01", "admin", "s3cret")

    assert secret["metadata"]["name"] == "gpu-01-bmc"
    assert secret["metadata"]["namespace"] == MACHINES_NAMESPACE
    assert secret["metadata"]["labels"][lbl.MACHINE] == "gpu-01"
    assert decoded(secret) == {"username": "admin", "password": "s3cret"}


def test_bootstrap_token_secret_is_a_bootstrap_token_of_the_portal_group() -> None:
    secret = bootstrap_token_secret("gpu-01", TOKEN, EXPIRES)
    data = decoded(secret)

    assert secret["metadata"]["name"] == "bootstrap-token-abc123"
    assert secret["metadata"]["namespace"] == "kube-system"
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    assert (data["token-id"], data["token-secret"]) == ("abc123", "0123456789abcdef")
    assert data["expiration"] == "2026-12-02T20:30:00Z"
    assert data["usage-bootstrap-authentication"] == "true"
    assert data["auth-extra-groups"] == BOOTSTRAP_GROUP
    assert "gpu-01" in data["description"]
    assert secret["metadata"]["labels"][lbl.MACHINE] == "gpu-01"


def test_bootstrap_token_expiration_is_written_in_utc() -> None:
    two_hours_east = timezone(timedelta(hours=2))
    secret = bootstrap_token_secret("gpu-01", TOKEN, datetime(2026, 12, 2, 22, 30,
                                                               tzinfo=two_hours_east))

    assert decoded(secret)["expiration"] == "2026-12-02T20:30:00Z"


def test_bootstrap_token_without_timezone_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone"):
        bootstrap_token_secret("gpu-01", TOKEN, datetime(2026, 12, 2, 20, 30))


def test_generated_bootstrap_tokens_have_the_api_servers_format() -> None:
    token = BootstrapToken.generate(random.Random(7).choice)

    assert len(token.token_id) == 6 and len(token.secret) == 16
    assert token.value == f"{token.token_id}.{token.secret}"
    assert BootstrapToken.generate(random.Random(8).choice) != token


@pytest.mark.parametrize(("token_id", "secret"), [
    ("ABC123", "0123456789abcdef"), ("abc12", "0123456789abcdef"), ("abc123", "0123456789abcde"),
])
def test_malformed_bootstrap_tokens_are_refused(token_id: str, secret: str) -> None:
    with pytest.raises(ValueError, match="bootstrap token"):
        BootstrapToken(token_id, secret)


def test_bootstrap_token_repr_hides_the_secret() -> None:
    assert "0123456789abcdef" not in repr(TOKEN)
    assert "0123456789abcdef" not in str(TOKEN)


def test_bootstrap_group_may_request_and_have_approved_a_node_client_certificate() -> None:
    bindings = bootstrap_role_bindings()

    assert {b["roleRef"]["name"] for b in bindings} == {
        "system:node-bootstrapper",
        "system:certificates.k8s.io:certificatesigningrequests:nodeclient"}
    assert all(b["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                  "name": BOOTSTRAP_GROUP}] for b in bindings)


# ----- user data


def test_user_data_is_a_cloud_config_under_the_key_the_operator_reads() -> None:
    secret = joining_user_data()
    text = decoded(secret)[USER_DATA_KEY]

    assert secret["metadata"]["name"] == "gpu-01-user-data"
    assert secret["metadata"]["namespace"] == MACHINES_NAMESPACE
    assert text.startswith("#cloud-config\n")
    assert yaml.safe_load(text)["runcmd"] == [["systemctl", "enable", "--now", "kubelet"]]


def test_bootstrap_kubeconfig_in_the_user_data_holds_server_ca_and_token() -> None:
    files = written_files(decoded(joining_user_data())[USER_DATA_KEY])
    kubeconfig_file = files[BOOTSTRAP_KUBECONFIG_PATH]
    kubeconfig = yaml.safe_load(kubeconfig_file["content"])
    context = next(c["context"] for c in kubeconfig["contexts"]
                   if c["name"] == kubeconfig["current-context"])
    cluster = next(c["cluster"] for c in kubeconfig["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in kubeconfig["users"] if u["name"] == context["user"])

    assert kubeconfig_file["permissions"] == "0600"
    assert cluster == {"server": SERVER, "certificate-authority-data": CA_DATA}
    assert user == {"token": "abc123.0123456789abcdef"}


def test_kubelet_reports_the_machines_provider_id_and_the_node_name() -> None:
    files = written_files(decoded(joining_user_data(node_name="gpu-node-7"))[USER_DATA_KEY])

    assert files[KUBELET_DEFAULTS_PATH]["content"] == (
        "KUBELET_EXTRA_ARGS=--provider-id=metal3://portal-machines/gpu-01"
        " --hostname-override=gpu-node-7\n")
    assert provider_id("gpu-01") == "metal3://portal-machines/gpu-01"


def test_user_data_refuses_a_node_name_that_is_not_a_dns_label() -> None:
    with pytest.raises(ValueError, match="node name"):
        joining_user_data(node_name="GPU 01")


# ----- BareMetalHost


def test_provisioning_host_names_its_secrets_image_and_boot_mac() -> None:
    host = provisioning_host()
    spec = host["spec"]

    assert (host["apiVersion"], host["kind"]) == (METAL3_API_VERSION, BAREMETAL_HOST)
    assert host["metadata"]["namespace"] == MACHINES_NAMESPACE
    assert spec["bmc"] == {"address": BMC, "credentialsName": "gpu-01-bmc"}
    assert spec["bootMACAddress"] == MAC and spec["online"] is True
    assert spec["image"] == {"url": IMAGE.url, "checksum": IMAGE.checksum,
                             "checksumType": "sha256", "format": "qcow2"}
    assert spec["userData"] == {"name": "gpu-01-user-data", "namespace": MACHINES_NAMESPACE}


def test_pooled_host_has_neither_image_nor_user_data() -> None:
    spec = pooled_host(online=False)["spec"]

    assert "image" not in spec and "userData" not in spec
    assert spec["online"] is False


def test_certificate_verification_is_only_disabled_when_asked() -> None:
    assert provisioning_host(disable_certificate_verification=True)["spec"]["bmc"][
        "disableCertificateVerification"] is True


@pytest.mark.parametrize(("image", "message"), [
    (MachineImage("images/ubuntu.qcow2", "ab"), "absolute"),
    (MachineImage(IMAGE.url, "ab", checksum_type="sha1"), "checksum type"),
    (MachineImage(IMAGE.url, "ab", format="iso"), "format"),
    (MachineImage(IMAGE.url, ""), "checksum"),
])
def test_images_the_operator_would_refuse_are_refused(image: MachineImage, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        provisioning_host(image=image)


def test_live_iso_needs_no_checksum() -> None:
    image = MachineImage("https://images.example.com/live.iso", "", format="live-iso")

    assert provisioning_host(image=image)["spec"]["image"]["format"] == "live-iso"


@pytest.mark.parametrize("mac", ["52:54:00:aa:bb", "52-54-00-aa-bb-01", "zz:54:00:aa:bb:01"])
def test_malformed_boot_mac_is_refused(mac: str) -> None:
    with pytest.raises(ValueError, match="MAC"):
        provisioning_host(boot_mac=mac)


def test_user_data_without_an_image_is_refused() -> None:
    with pytest.raises(ValueError, match="user data"):
        provisioning_host(image=None)


@pytest.mark.parametrize("name", ["GPU-01", "gpu_01", "123e4567-e89b-12d3-a456-426614174000"])
def test_machine_names_the_host_objects_cannot_carry_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="machine name"):
        check_machine_name(name)
    with pytest.raises(ValueError, match="machine name"):
        bmc_secret(name, "admin", "s3cret")


# ----- observation


def with_status(host: dict[str, Any], state: str, *, image_url: str = "",
                **status: Any) -> dict[str, Any]:
    provisioning: dict[str, Any] = {"state": state, "ID": "4a8e", "image": {"url": image_url}}
    return {**host, "status": {"operationalStatus": "OK", "errorMessage": "", "poweredOn": True,
                               "errorCount": 0, "hardwareProfile": "unknown",
                               "provisioning": provisioning, **status}}


def test_no_host_is_observed_as_absent() -> None:
    observation = host_observation(None)

    assert not observation.exists and not observation.provisioned and not observation.in_pool


def test_host_before_the_operators_first_pass_is_in_no_state() -> None:
    observation = host_observation(pooled_host())

    assert observation.exists and observation.state == ProvisioningState.NONE
    assert not observation.in_pool and not observation.has_error


@pytest.mark.parametrize("state", ["available", "ready"])
def test_available_host_without_image_is_in_the_pool(state: str) -> None:
    observation = host_observation(with_status(pooled_host(), state))

    assert observation.in_pool and observation.is_available and observation.image_settled


def test_available_host_asked_for_an_image_is_not_yet_provisioned() -> None:
    observation = host_observation(with_status(provisioning_host(), "available"))

    assert not observation.image_settled and not observation.provisioned
    assert not observation.in_pool


def test_provisioning_host_is_not_provisioned_until_the_image_is_in_status() -> None:
    provisioning = host_observation(with_status(provisioning_host(), "provisioning"))
    provisioned = host_observation(with_status(provisioning_host(), "provisioned",
                                               image_url=IMAGE.url))

    assert not provisioning.provisioned
    assert provisioned.provisioned and provisioned.image_settled


def test_provisioned_host_of_an_older_image_is_not_the_current_spec() -> None:
    host = provisioning_host(image=MachineImage("https://images.example.com/v2.qcow2", "cd"))
    observation = host_observation(with_status(host, "provisioned", image_url=IMAGE.url))

    assert not observation.provisioned and not observation.image_settled


def test_released_host_still_provisioned_is_neither_provisioned_nor_in_the_pool() -> None:
    observation = host_observation(with_status(pooled_host(), "provisioned", image_url=IMAGE.url))

    assert not observation.provisioned and not observation.in_pool


def test_deprovisioning_host_is_not_in_the_pool_until_the_operator_clears_the_image() -> None:
    deprovisioning = host_observation(with_status(pooled_host(), "deprovisioning",
                                                  image_url=IMAGE.url))
    available = host_observation(with_status(pooled_host(), "available"))

    assert not deprovisioning.in_pool and available.in_pool


def test_bmc_error_is_observed_with_its_type_and_message() -> None:
    host = with_status(pooled_host(), "registering", operationalStatus="error",
                       errorType="registration error", errorCount=2, poweredOn=False,
                       errorMessage="Failed to get power state for node 4a8e: BMC unreachable")
    observation = host_observation(host)

    assert observation.has_error and observation.state == ProvisioningState.REGISTERING
    assert observation.error_type == "registration error"
    assert observation.error_message.endswith("BMC unreachable")
    assert observation.error_count == 2 and not observation.powered_on


def test_operational_status_and_power_are_read() -> None:
    observation = host_observation(with_status(pooled_host(online=False), "available",
                                               operationalStatus="detached", poweredOn=False))

    assert observation.operational_status == "detached"
    assert not observation.powered_on and not observation.online and not observation.has_error


# ----- the ports


def test_memory_port_keeps_a_hosts_status_when_the_portal_reapplies_it() -> None:
    kube = InMemoryKube((*("default", "kube-system"), MACHINES_NAMESPACE))
    kube.apply(provisioning_host())
    kube.seed_status(METAL3_API_VERSION, BAREMETAL_HOST, "gpu-01", MACHINES_NAMESPACE,
                     with_status(provisioning_host(), "provisioned", image_url=IMAGE.url)["status"])

    released = kube.apply(pooled_host())
    stored = kube.get(METAL3_API_VERSION, BAREMETAL_HOST, "gpu-01", MACHINES_NAMESPACE)

    assert stored == released
    assert "image" not in released["spec"] and "userData" not in released["spec"]
    assert released["status"]["provisioning"]["state"] == "provisioned"
    observation = host_observation(stored)
    assert not observation.provisioned and not observation.in_pool


def test_memory_port_lists_and_deletes_hosts_by_machine_label() -> None:
    kube = InMemoryKube((*("default", "kube-system"), MACHINES_NAMESPACE))
    kube.apply(provisioning_host())
    kube.apply(bootstrap_token_secret("gpu-01", TOKEN, EXPIRES))

    listed = kube.list(METAL3_API_VERSION, BAREMETAL_HOST, MACHINES_NAMESPACE,
                       label_selector={lbl.MACHINE: "gpu-01"})
    tokens = kube.list("v1", "Secret", "kube-system", label_selector={lbl.MACHINE: "gpu-01"})

    assert [h["metadata"]["name"] for h in listed] == ["gpu-01"]
    assert [t["metadata"]["name"] for t in tokens] == ["bootstrap-token-abc123"]
    assert kube.delete(METAL3_API_VERSION, BAREMETAL_HOST, "gpu-01", MACHINES_NAMESPACE)
    assert kube.get(METAL3_API_VERSION, BAREMETAL_HOST, "gpu-01", MACHINES_NAMESPACE) is None


def test_memory_port_refuses_status_of_a_missing_host() -> None:
    kube = InMemoryKube((MACHINES_NAMESPACE,))

    with pytest.raises(Exception, match="not found"):
        kube.seed_status(METAL3_API_VERSION, BAREMETAL_HOST, "gpu-01", MACHINES_NAMESPACE, {})


def test_real_adapter_applies_hosts_and_bootstrap_tokens(kube_adapter: KubernetesAdapter) -> None:
    kube_adapter.apply({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": MACHINES_NAMESPACE}})
    kube_adapter.apply(provisioning_host())
    kube_adapter.apply(bootstrap_token_secret("gpu-01", TOKEN, EXPIRES))

    host = kube_adapter.get(METAL3_API_VERSION, BAREMETAL_HOST, "gpu-01", MACHINES_NAMESPACE)
    token = kube_adapter.get("v1", "Secret", "bootstrap-token-abc123", "kube-system")
    assert host is not None and host["spec"]["image"]["url"] == IMAGE.url
    assert token is not None and token["type"] == "bootstrap.kubernetes.io/token"
    assert kube_adapter.delete(METAL3_API_VERSION, BAREMETAL_HOST, "gpu-01", MACHINES_NAMESPACE)
