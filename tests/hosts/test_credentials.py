"""Credentials are checked on input, and refusals name the field without echoing the secret."""

from __future__ import annotations

import pytest
import yaml

from app.hosts import credentials
from app.kit.errors import ValidationFailed
from app.lab.pki import CertificateAuthority
from tests.support.kube_server import kubeconfig_yaml

SECRET = "s3cr3t-token-value"
CA = CertificateAuthority()


def refused(call: object) -> ValidationFailed:
    assert callable(call)
    with pytest.raises(ValidationFailed) as raised:
        call()
    assert SECRET not in str(raised.value.detail) + str(raised.value.errors)
    return raised.value


def test_a_self_contained_kubeconfig_is_accepted_with_its_server() -> None:
    text = kubeconfig_yaml("https://gpu.example.com:6443", CA.cert_pem, token=SECRET)
    checked = credentials.from_kubeconfig(text)
    assert (checked.kind, checked.server) == ("kubeconfig", "https://gpu.example.com:6443")
    assert SECRET not in repr(checked)


@pytest.mark.parametrize(("text", "why"), [
    (f"token: {SECRET}\n  bad: [", "invalid YAML"),
    (f"just-a-token-{SECRET}", "no clusters"),
    (kubeconfig_yaml("http://gpu.example.com", CA.cert_pem, token=SECRET), "https://"),
    (kubeconfig_yaml("https://", CA.cert_pem, token=SECRET), "https://"),
])
def test_a_bad_kubeconfig_is_refused_naming_the_field(text: str, why: str) -> None:
    error = refused(lambda: credentials.from_kubeconfig(text))
    assert error.errors[0]["field"].startswith("credentials.kubeconfig")
    assert why in error.errors[0]["message"]


def test_file_paths_and_exec_plugins_are_refused() -> None:
    config = yaml.safe_load(kubeconfig_yaml("https://gpu.example.com", CA.cert_pem,
                                            token=SECRET))
    config["users"][0]["user"] = {"exec": {"command": "aws"}}
    assert "plugins" in refused(lambda: credentials.from_kubeconfig(
        yaml.safe_dump(config))).errors[0]["message"]
    config["clusters"][0]["cluster"]["certificate-authority"] = "/home/me/ca.crt"
    assert "inline" in refused(lambda: credentials.from_kubeconfig(
        yaml.safe_dump(config))).errors[0]["message"]


def test_a_token_with_ca_and_server_becomes_a_kubeconfig_that_reaches_the_server() -> None:
    checked = credentials.from_token("https://gpu.example.com/", SECRET, CA.cert_pem.decode())
    assert (checked.kind, checked.server) == ("token", "https://gpu.example.com")
    again = credentials.from_kubeconfig(checked.kubeconfig_yaml)
    assert again.server == "https://gpu.example.com"
    assert yaml.safe_load(checked.kubeconfig_yaml)["users"][0]["user"]["token"] == SECRET


@pytest.mark.parametrize(("server", "token", "ca", "field"), [
    ("http://gpu.example.com", SECRET, CA.cert_pem.decode(), "credentials.server"),
    ("https://gpu.example.com", "", CA.cert_pem.decode(), "credentials.token"),
    ("https://gpu.example.com", f"{SECRET} x", CA.cert_pem.decode(), "credentials.token"),
    ("https://gpu.example.com", SECRET, "not a certificate", "credentials.ca_certificate"),
])
def test_a_bad_token_credential_names_the_field(server: str, token: str, ca: str,
                                                field: str) -> None:
    error = refused(lambda: credentials.from_token(server, token, ca))
    assert error.errors[0]["field"] == field


@pytest.mark.parametrize("server", ["https://[::1", "https://gpu.example.com:99999",
                                    "https://gpu example.com", "ftp://gpu.example.com"])
def test_a_malformed_server_url_is_a_refusal_not_a_crash(server: str) -> None:
    error = refused(lambda: credentials.from_token(server, SECRET, CA.cert_pem.decode()))
    assert error.errors[0]["field"] == "credentials.server"


@pytest.mark.parametrize("text", ["clusters: []\ncontexts: [just-a-string]",
                                  "clusters: [1, 2]\ncontexts: [{name: a}]\ncurrent-context: a",
                                  "[" * 5000])
def test_odd_shapes_are_refusals_not_crashes(text: str) -> None:
    refused(lambda: credentials.from_kubeconfig(text))


def test_a_kubeconfig_the_client_cannot_use_is_refused_before_it_is_stored() -> None:
    config = yaml.safe_load(kubeconfig_yaml("https://gpu.example.com", CA.cert_pem))
    config["users"][0]["user"] = {"client-certificate-data": "abcde", "client-key-data": SECRET}
    error = refused(lambda: credentials.from_kubeconfig(yaml.safe_dump(config)))
    assert "the Kubernetes client cannot use it" in error.errors[0]["message"]
