"""The admission webhook's serving certificate: issue, decide when to rotate, and the trust bundle.

One self-signed certificate per period, no CA. A CA would add a second key to keep (in the same
Secret, so no safer) and a second rotation schedule; with a self-signed certificate the trust
bundle the API server gets (caBundle) is simply the certificates the webhook may serve: the
current one and, during a rotation, the previous one. Go's verifier accepts a leaf that is itself
in the trusted pool.

Pure apart from key generation: the caller passes the clock.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Clocks of the API server and of the worker may disagree a little.
CLOCK_SKEW = timedelta(minutes=5)
_PEM_BEGIN = "-----BEGIN CERTIFICATE-----"
_PEM_END = "-----END CERTIFICATE-----"


@dataclass(frozen=True)
class ServingCertificate:
    cert_pem: str
    key_pem: str = field(repr=False)


def issue(hosts: Sequence[str], now: datetime, lifetime: timedelta) -> ServingCertificate:
    """A fresh key pair and a self-signed serving certificate for ``hosts`` (DNS names or IPs)."""
    if not hosts:
        raise ValueError("a serving certificate needs at least one host name")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0][:64])])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW).not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(general_names(hosts)), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return ServingCertificate(_pem(cert), key_pem.decode())


def rotation_due(cert_pem: str, hosts: Sequence[str], now: datetime) -> bool:
    """Less than a third of the lifetime left (90-day certificates at 30 days), not valid yet,
    or made for other host names (the setting changed)."""
    cert = x509.load_pem_x509_certificate(cert_pem.encode())
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return (now < start or end - now < (end - start) / 3
            or _names_of(cert) != set(general_names(hosts)))


def trusted_bundle(cert_pems: Iterable[str], now: datetime) -> str:
    """The certificates among ``cert_pems`` not yet expired, once each, in order, as one PEM."""
    kept: list[str] = []
    for pem in cert_pems:
        for cert in _parse_all(pem):
            text = _pem(cert)
            if cert.not_valid_after_utc > now and text not in kept:
                kept.append(text)
    return "".join(kept)


def bundle_certificates(bundle_pem: str) -> list[str]:
    """Each certificate of a PEM bundle, as its own PEM; unparsable blocks are left out."""
    return [_pem(cert) for cert in _parse_all(bundle_pem)]


def fingerprint(cert_pem: str) -> str:
    """SHA-256 of the DER form: how logs and audit events name a certificate."""
    cert = x509.load_pem_x509_certificate(cert_pem.encode())
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def not_after(cert_pem: str) -> datetime:
    return x509.load_pem_x509_certificate(cert_pem.encode()).not_valid_after_utc


def matches_key(cert_pem: str, key_pem: str) -> bool:
    """Whether the private key belongs to the certificate (a half-written Secret would not)."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem.encode())
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    except ValueError:
        return False
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.DER
    return bool(cert.public_key().public_bytes(encoding, public)
                == key.public_key().public_bytes(encoding, public))


def _parse_all(pem: str) -> list[x509.Certificate]:
    certs = []
    for block in pem.split(_PEM_END):
        if _PEM_BEGIN not in block:
            continue
        text = f"{block[block.index(_PEM_BEGIN):].rstrip()}\n{_PEM_END}\n"
        try:
            certs.append(x509.load_pem_x509_certificate(text.encode()))
        except ValueError:
            continue
    return certs


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def general_names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    """Subject alternative names: IP addresses as such, anything else as a DNS name."""
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _names_of(cert: x509.Certificate) -> set[x509.GeneralName]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return set()
    return set(san.value)
