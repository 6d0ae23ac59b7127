"""The webhook's TLS Secret as the worker and the server read it."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from app.kube.manifests.webhook import BUNDLE_KEY, CERT_KEY, PRIVATE_KEY
from app.kube.port import Manifest
from app.webhook import certificates as certs


@dataclass(frozen=True)
class StoredPair:
    """The Secret's contents, decoded; ``pair`` is None when the key pair is missing or broken."""

    pair: certs.ServingCertificate | None
    bundle: list[str] = field(default_factory=list)
    resource_version: str | None = None


def read_secret(secret: Manifest | None) -> StoredPair:
    if secret is None:
        return StoredPair(None)
    data = secret.get("data") or {}
    cert, key = decoded(data, CERT_KEY), decoded(data, PRIVATE_KEY)
    bundle = certs.bundle_certificates(decoded(data, BUNDLE_KEY) or "")
    version = (secret.get("metadata") or {}).get("resourceVersion")
    usable = bool(cert and key and certs.bundle_certificates(cert)
                  and certs.matches_key(cert, key))
    pair = certs.ServingCertificate(cert, key) if usable else None
    return StoredPair(pair, bundle, version)


def decoded(data: dict[str, Any], key: str) -> str:
    return unbase64(str(data.get(key) or ""))


def unbase64(value: str) -> str:
    """Base64 text as a string; empty when it is not valid base64 of UTF-8."""
    try:
        return base64.b64decode(value).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""
