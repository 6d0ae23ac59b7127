"""A host's credentials checked on input and turned into the one form stored: a kubeconfig.

Messages name what is wrong, never echo what was sent: the input is a secret.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import yaml
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from app.kit.errors import ValidationFailed
from app.kube.connector import kubeconfig_problem

# Paths on the admin's machine mean nothing to the portal; credential plugins would run
# programs on it. A stored kubeconfig must carry everything inline.
_FILE_KEYS = ("certificate-authority", "client-certificate", "client-key", "tokenFile")
_PROGRAM_KEYS = ("exec", "auth-provider")


@dataclass(frozen=True)
class CheckedCredentials:
    kind: str  # "kubeconfig" | "token"
    server: str
    kubeconfig_yaml: str = field(repr=False)


def from_kubeconfig(text: str, field_name: str = "credentials.kubeconfig") -> CheckedCredentials:
    config = _parse(text, field_name)
    context = _current_context(config, field_name)
    cluster = _named(config, "clusters", str(context.get("cluster") or ""), "cluster",
                     field_name)
    server = check_server(str(cluster.get("server") or ""), f"{field_name} (cluster server)")
    if any(key in cluster for key in _FILE_KEYS):
        raise _invalid(field_name, "the cluster must carry certificate-authority-data "
                                   "inline, not a file path")
    if cluster.get("certificate-authority-data"):
        where = f"{field_name} (certificate-authority-data)"
        _check_ca(_pem_of(cluster["certificate-authority-data"], where).decode(errors="replace"),
                  where)
    user = _named(config, "users", str(context.get("user") or ""), "user", field_name)
    if any(key in user for key in _FILE_KEYS):
        raise _invalid(field_name, "the user's credentials must be inline (…-data, token), "
                                   "not file paths")
    if any(key in user for key in _PROGRAM_KEYS):
        raise _invalid(field_name, "exec and auth-provider plugins are not supported: use a "
                                   "ServiceAccount token or a client certificate")
    _check_client_certificate(user, field_name)
    unusable = kubeconfig_problem(text)
    if unusable:
        raise _invalid(field_name, f"{unusable}: check the certificate, key and token data")
    return CheckedCredentials("kubeconfig", server, text)


def from_token(server: str, token: str, ca_certificate: str,
               field_prefix: str = "credentials") -> CheckedCredentials:
    server = check_server(server, f"{field_prefix}.server")
    token = token.strip()
    if not token or any(c.isspace() for c in token):
        raise _invalid(f"{field_prefix}.token", "a ServiceAccount token: one word, not empty")
    ca_pem = _check_ca(ca_certificate, f"{field_prefix}.ca_certificate")
    name = "host"
    kubeconfig = yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": name, "cluster": {
            "server": server,
            "certificate-authority-data": base64.b64encode(ca_pem.encode()).decode()}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    })
    return CheckedCredentials("token", server, kubeconfig)


def check_server(server: str, field_name: str) -> str:
    problem = _invalid(field_name, "the API server must be an https:// URL with a host")
    try:
        parts = urlsplit(server.strip())
        host, _port = parts.hostname, parts.port  # both raise on a malformed netloc
    except ValueError:
        raise problem from None
    if parts.scheme != "https" or not host or any(c.isspace() for c in server.strip()):
        raise problem
    return server.strip().rstrip("/")


def server_of(kubeconfig_yaml: str) -> str:
    """The server of a stored (already checked) kubeconfig's current context."""
    return from_kubeconfig(kubeconfig_yaml).server


def _parse(text: str, field_name: str) -> dict[str, Any]:
    try:
        config = yaml.safe_load(text)
    except RecursionError:
        raise _invalid(field_name, "not a readable kubeconfig: nested too deeply") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise _invalid(field_name, f"not a readable kubeconfig: invalid YAML{where}") from None
    if not isinstance(config, dict) or not isinstance(config.get("clusters"), list):
        raise _invalid(field_name, "not a kubeconfig: no clusters list")
    return config


def _current_context(config: dict[str, Any], field_name: str) -> dict[str, Any]:
    contexts = config.get("contexts")
    if not isinstance(contexts, list) or not contexts:
        raise _invalid(field_name, "the kubeconfig has no contexts")
    current = config.get("current-context")
    if not current:
        if len(contexts) != 1:
            raise _invalid(field_name, "the kubeconfig has several contexts and no "
                                       "current-context")
        only = contexts[0]
        current = only.get("name") if isinstance(only, dict) else None
    return _named(config, "contexts", str(current), "context", field_name)


def _named(config: dict[str, Any], section: str, name: str, what: str,
           field_name: str) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name and isinstance(
                entry.get(what), dict):
            found: dict[str, Any] = entry[what]
            return found
    raise _invalid(field_name, f"the kubeconfig names {what} {name!r} but does not define it")


def _check_ca(text: str, field_name: str) -> str:
    try:
        certificates = x509.load_pem_x509_certificates(text.strip().encode())
    except ValueError:
        raise _invalid(field_name, "a PEM CA certificate (-----BEGIN CERTIFICATE-----)"
                       ) from None
    if not certificates:
        raise _invalid(field_name, "a PEM CA certificate (-----BEGIN CERTIFICATE-----)")
    return text.strip() + "\n"


def _check_client_certificate(user: dict[str, Any], field_name: str) -> None:
    """A client certificate and its key parse and belong together: otherwise the first call to
    the host fails, long after the admin who typed them has gone."""
    given = [key for key in _CLIENT_KEYS if user.get(key)]
    if not given:
        return  # token credentials
    if len(given) == 1:
        missing = next(key for key in _CLIENT_KEYS if key not in given)
        raise _invalid(f"{field_name} ({missing})",
                       "a client certificate needs both client-certificate-data and "
                       "client-key-data")
    certificate = _client_certificate(user["client-certificate-data"], field_name)
    key = _client_key(user["client-key-data"], field_name)
    if _public_der(key) != certificate.public_key().public_bytes(*_SPKI):
        raise _invalid(f"{field_name} (client-key-data)",
                       "the client key does not belong to the client certificate")
    expired = certificate.not_valid_after_utc
    if expired <= datetime.now(UTC):
        raise _invalid(f"{field_name} (client-certificate-data)",
                       f"the client certificate expired on {expired:%Y-%m-%d %H:%M} UTC: "
                       "issue a new one")


_CLIENT_KEYS = ("client-certificate-data", "client-key-data")
_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _client_certificate(data: object, field_name: str) -> x509.Certificate:
    where = f"{field_name} (client-certificate-data)"
    try:
        # The first certificate is the client's own; any after it are intermediates.
        return x509.load_pem_x509_certificates(_pem_of(data, where))[0]
    except (ValueError, IndexError):
        raise _invalid(where, "not a certificate: base64 of a PEM certificate "
                              "(-----BEGIN CERTIFICATE-----)") from None


def _client_key(data: object, field_name: str) -> PrivateKeyTypes:
    where = f"{field_name} (client-key-data)"
    try:
        return serialization.load_pem_private_key(_pem_of(data, where), password=None)
    except TypeError:
        raise _invalid(where, "the client key is encrypted: give it without a passphrase"
                       ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise _invalid(where, "not a private key: base64 of a PEM RSA, EC or Ed25519 key "
                              "(PKCS#1, PKCS#8 or SEC1)") from None


def _pem_of(data: object, where: str) -> bytes:
    """Kubeconfigs carry certificates and keys as base64 of their PEM text."""
    try:
        return base64.b64decode("".join(str(data).split()), validate=True)
    except (binascii.Error, ValueError):
        raise _invalid(where, "not base64 (a kubeconfig carries the PEM text base64-encoded)"
                       ) from None


def _public_der(key: PrivateKeyTypes) -> bytes:
    return key.public_key().public_bytes(*_SPKI)


def _invalid(field_name: str, message: str) -> ValidationFailed:
    return ValidationFailed.on_field(field_name, message)
