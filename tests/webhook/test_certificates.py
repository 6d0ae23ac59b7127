"""The serving certificate: when it is rotated and which certificates the API server trusts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cryptography import x509

from app.webhook import certificates as certs

HOSTS = ["gpu-tenant-portal-webhook.gpu-tenant-portal.svc", "127.0.0.1"]
DAY = timedelta(days=1)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
LIFETIME = 90 * DAY


def test_a_certificate_names_its_hosts_and_its_key_matches() -> None:
    issued = certs.issue(HOSTS, T0, LIFETIME)
    cert = x509.load_pem_x509_certificate(issued.cert_pem.encode())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [HOSTS[0]]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == [HOSTS[1]]
    assert certs.not_after(issued.cert_pem) == T0 + LIFETIME
    assert certs.matches_key(issued.cert_pem, issued.key_pem)
    assert not certs.matches_key(issued.cert_pem, certs.issue(HOSTS, T0, LIFETIME).key_pem)
    assert "PRIVATE" not in repr(issued)


def test_rotation_is_due_when_a_third_of_the_lifetime_is_left() -> None:
    issued = certs.issue(HOSTS, T0, LIFETIME).cert_pem
    assert not certs.rotation_due(issued, HOSTS, T0)
    assert not certs.rotation_due(issued, HOSTS, T0 + 59 * DAY)
    assert certs.rotation_due(issued, HOSTS, T0 + 61 * DAY)
    assert certs.rotation_due(issued, HOSTS, T0 + 100 * DAY)  # expired


def test_rotation_is_due_when_the_host_names_changed_or_it_is_not_valid_yet() -> None:
    issued = certs.issue(HOSTS, T0, LIFETIME).cert_pem
    assert certs.rotation_due(issued, ["webhook.example.com"], T0)
    assert certs.rotation_due(issued, HOSTS, T0 - DAY)


def test_the_bundle_keeps_previous_and_new_and_drops_expired_ones() -> None:
    previous = certs.issue(HOSTS, T0, LIFETIME).cert_pem
    new = certs.issue(HOSTS, T0 + 61 * DAY, LIFETIME).cert_pem
    during = certs.trusted_bundle([previous, new], T0 + 61 * DAY)
    assert certs.bundle_certificates(during) == [previous, new]
    after = certs.trusted_bundle([*certs.bundle_certificates(during), new], T0 + 91 * DAY)
    assert certs.bundle_certificates(after) == [new]


def test_a_bundle_survives_noise_between_certificates() -> None:
    one, two = (certs.issue(HOSTS, T0, LIFETIME).cert_pem for _ in range(2))
    text = f"# first\n{one}\nnot a certificate\n{two}-----BEGIN CERTIFICATE-----\nbroken\n"
    assert certs.bundle_certificates(text) == [one, two]
