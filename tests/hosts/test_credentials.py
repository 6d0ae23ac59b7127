"""Credentials are checked on input, and refusals name the field without echoing the secret."""

from __future__ import annotations

from base64 import b64encode
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

from app.hosts import credentials
from app.kit.errors import ValidationFailed
from app.lab.pki import CertificateAuthority, KeyPair
from tests.support.kube_server import kubeconfig_yaml

SECRET = "s3cr3t-token-value"
CA = CertificateAuthority()
PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


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
], ids=["invalid-yaml", "no-clusters", "http-server", "no-host"])  # the CA differs per process
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
], ids=["http-server", "no-token", "token-with-space", "ca-not-a-certificate"])
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


def test_a_kubeconfig_whose_ca_is_not_a_certificate_is_refused() -> None:
    config = yaml.safe_load(kubeconfig_yaml("https://gpu.example.com", CA.cert_pem))
    config["clusters"][0]["cluster"]["certificate-authority-data"] = b64encode(
        SECRET.encode()).decode()
    error = refused(lambda: credentials.from_kubeconfig(yaml.safe_dump(config)))
    assert error.errors[0] == {
        "field": "credentials.kubeconfig (certificate-authority-data)",
        "message": "a PEM CA certificate (-----BEGIN CERTIFICATE-----)"}


def _self_signed(key: PrivateKey, valid_for: timedelta = timedelta(days=30)) -> bytes:
    now = datetime.now(UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "portal")])
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=60)).not_valid_after(now + valid_for)
        .sign(key, None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()))
    return certificate.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: PrivateKey, form: serialization.PrivateFormat) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, form, serialization.NoEncryption())


def _with_client(cert_pem: bytes, key_pem: bytes) -> str:
    return kubeconfig_yaml("https://gpu.example.com", CA.cert_pem,
                           client=KeyPair(cert_pem, key_pem))


def _client_refusal(cert_pem: bytes, key_pem: bytes) -> tuple[str, str]:
    error = refused(lambda: credentials.from_kubeconfig(_with_client(cert_pem, key_pem)))
    said = str(error.detail) + str(error.errors)
    assert b64encode(key_pem).decode() not in said
    for line in key_pem.decode().splitlines()[1:-1]:
        assert line not in said
    return error.errors[0]["field"], error.errors[0]["message"]


RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC = ec.generate_private_key(ec.SECP256R1())
ED25519 = ed25519.Ed25519PrivateKey.generate()


@pytest.mark.parametrize(("key", "form"), [
    (RSA, serialization.PrivateFormat.TraditionalOpenSSL),  # PKCS#1
    (RSA, serialization.PrivateFormat.PKCS8),
    (EC, serialization.PrivateFormat.TraditionalOpenSSL),  # SEC1
    (EC, serialization.PrivateFormat.PKCS8),
    (ED25519, serialization.PrivateFormat.PKCS8),
])
def test_a_client_certificate_with_its_own_key_is_accepted(
        key: PrivateKey, form: serialization.PrivateFormat) -> None:
    checked = credentials.from_kubeconfig(_with_client(_self_signed(key), _key_pem(key, form)))
    assert checked.server == "https://gpu.example.com"


def test_a_client_certificate_issued_by_the_ca_with_its_key_is_accepted() -> None:
    credentials.from_kubeconfig(kubeconfig_yaml("https://gpu.example.com", CA.cert_pem,
                                                client=CA.client("portal")))


KEY_FIELD = "credentials.kubeconfig (client-key-data)"
CERT_FIELD = "credentials.kubeconfig (client-certificate-data)"
PKCS8 = serialization.PrivateFormat.PKCS8


def test_a_garbage_client_key_is_refused_naming_the_field() -> None:
    garbage = (b"-----BEGIN PRIVATE KEY-----\nMIIEv" + SECRET.encode()
               + b"\n-----END PRIVATE KEY-----\n")
    field, message = _client_refusal(_self_signed(EC), garbage)
    assert (field, message) == (KEY_FIELD, "not a private key: base64 of a PEM RSA, EC or "
                                           "Ed25519 key (PKCS#1, PKCS#8 or SEC1)")


def test_the_key_of_another_certificate_is_refused() -> None:
    field, message = _client_refusal(_self_signed(EC), _key_pem(RSA, PKCS8))
    assert (field, message) == (KEY_FIELD, "the client key does not belong to the client "
                                           "certificate")
    other_ec = ec.generate_private_key(ec.SECP256R1())
    assert _client_refusal(_self_signed(EC), _key_pem(other_ec, PKCS8))[0] == KEY_FIELD


def test_a_garbage_client_certificate_is_refused_naming_the_field() -> None:
    field, message = _client_refusal(b"-----BEGIN CERTIFICATE-----\nnope\n", _key_pem(EC, PKCS8))
    assert field == CERT_FIELD and "not a certificate" in message


def test_client_data_that_is_not_base64_is_refused() -> None:
    config = yaml.safe_load(_with_client(_self_signed(EC), _key_pem(EC, PKCS8)))
    config["users"][0]["user"]["client-key-data"] = f"{SECRET}!*"
    error = refused(lambda: credentials.from_kubeconfig(yaml.safe_dump(config)))
    assert error.errors[0]["field"] == KEY_FIELD and "not base64" in error.errors[0]["message"]


def test_a_certificate_without_its_key_is_refused() -> None:
    config = yaml.safe_load(_with_client(_self_signed(EC), _key_pem(EC, PKCS8)))
    del config["users"][0]["user"]["client-key-data"]
    error = refused(lambda: credentials.from_kubeconfig(yaml.safe_dump(config)))
    assert error.errors[0]["field"] == KEY_FIELD and "both" in error.errors[0]["message"]


def test_an_encrypted_client_key_is_refused_asking_for_it_without_a_passphrase() -> None:
    encrypted = EC.private_bytes(serialization.Encoding.PEM, PKCS8,
                                 serialization.BestAvailableEncryption(b"passphrase"))
    field, message = _client_refusal(_self_signed(EC), encrypted)
    assert field == KEY_FIELD and "encrypted" in message


def test_an_expired_client_certificate_is_refused_saying_when_it_expired() -> None:
    expired = _self_signed(EC, valid_for=timedelta(days=-1))
    field, message = _client_refusal(expired, _key_pem(EC, PKCS8))
    when = x509.load_pem_x509_certificate(expired).not_valid_after_utc
    assert field == CERT_FIELD
    assert message == (f"the client certificate expired on {when:%Y-%m-%d %H:%M} UTC: "
                       "issue a new one")
