"""Webhook calls never reach the portal's own network: checked after DNS, on every call, and
connected to the address that was checked (app/kit/outbound.py)."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from app.kit import outbound
from app.kit.outbound import Refused, address_problem, checked_addresses, post, url_problem
from app.webhook.certificates import issue
from tests.support.http_servers import served

LOOPBACK = [ipaddress.ip_network("127.0.0.1/32")]
RECEIVER_NAME = "hooks.example.com"


def _resolver(*addresses: str) -> outbound.Resolver:
    def resolve(host: str, port: int, *_: Any) -> list[tuple[Any, ...]]:
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                 (a, port)) for a in addresses]
    return resolve


@pytest.mark.parametrize(("url", "problem"), [
    ("http://hooks.example.com/x", "must start with https://"),
    ("ftp://hooks.example.com/x", "must start with https://"),
    ("https:///x", "names no host"),
    ("https://user:secret@hooks.example.com/x", "must not carry a user name or password"),
    ("https://hooks.example.com/x#part", "must not carry a fragment"),
    ("https://hooks.example.com:99999/", "is not a URL"),
    ("https://hooks.example.com/" + "a" * 2048, "is longer than 2048 characters"),
])
def test_a_url_of_the_wrong_form_is_refused_with_its_reason(url: str, problem: str) -> None:
    assert (url_problem(url) or "").startswith(problem)


def test_plain_http_only_to_the_hosts_the_operator_lists() -> None:
    assert url_problem("https://hooks.example.com/x?team=a") is None
    assert url_problem("http://receiver.internal:8080/x", http_hosts=["Receiver.Internal"]) is None
    assert url_problem("http://other.internal/x", http_hosts=["receiver.internal"]) is not None


@pytest.mark.parametrize(("address", "why"), [
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
    ("169.254.169.254", "cloud metadata"), ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"), ("10.0.0.1", "private"), ("172.16.5.4", "private"),
    ("192.168.1.1", "private"), ("fd00:ec2::254", "private"),
    ("100.100.100.200", "private"), ("224.0.0.1", "unicast"),
    ("0.0.0.0", "unicast"),  # noqa: S104 - a refused address, nothing is bound
    # IPv6 forms that carry an IPv4 address inside: mapped, NAT64, 6to4, compatible
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:169.254.169.254", "cloud metadata"),
    ("64:ff9b::a00:1", "private"), ("2002:a00:1::", "private"), ("::a00:1", "private"),
])
def test_the_portals_own_networks_are_refused(address: str, why: str) -> None:
    problem = address_problem(ipaddress.ip_address(address))
    assert problem is not None and why in problem


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700:4700::1111"])
def test_public_addresses_are_called(address: str) -> None:
    assert address_problem(ipaddress.ip_address(address)) is None


def test_an_allowed_network_lets_its_addresses_through() -> None:
    assert address_problem(ipaddress.ip_address("127.0.0.1"), LOOPBACK) is None
    assert address_problem(ipaddress.ip_address("127.0.0.2"), LOOPBACK) is not None


def test_a_name_resolving_to_a_private_address_is_refused() -> None:
    with pytest.raises(Refused, match=r"hooks\.example\.com resolves to 10\.0\.0\.1 is a private"):
        checked_addresses("hooks.example.com", 443, resolve=_resolver("10.0.0.1"))


def test_every_address_a_name_resolves_to_must_pass() -> None:
    resolve = _resolver("93.184.216.34", "169.254.169.254")
    with pytest.raises(Refused, match="cloud metadata"):
        checked_addresses("hooks.example.com", 443, resolve=resolve)


def test_a_name_that_does_not_resolve_is_refused() -> None:
    def fails(*_: Any) -> list[tuple[Any, ...]]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    with pytest.raises(Refused, match="does not resolve"):
        checked_addresses("nowhere.example.com", 443, resolve=fails)


def test_a_resolver_that_hangs_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbound, "RESOLVE_SECONDS", 0.2)
    release = threading.Event()

    def hangs(*_: Any) -> list[tuple[Any, ...]]:
        release.wait(5)
        return []
    started = time.monotonic()
    with pytest.raises(Refused, match="did not resolve within"):
        checked_addresses("slow.example.com", 443, resolve=hangs)
    release.set()
    assert time.monotonic() - started < 2


class _Receiver(BaseHTTPRequestHandler):
    received: list[tuple[str, bytes]]
    redirect_to: str | None = None

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.append((self.path, body))
        if self.redirect_to:
            self.send_response(302)
            self.send_header("Location", self.redirect_to)
        else:
            self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *_: Any) -> None:
        pass


@contextmanager
def _https_receiver(tmp_path: Path, redirect_to: str | None = None
                    ) -> Iterator[tuple[int, list[tuple[str, bytes]], ssl.SSLContext]]:
    """An HTTPS receiver on 127.0.0.1 whose certificate names only RECEIVER_NAME."""
    certificate = issue([RECEIVER_NAME], datetime.now(UTC), timedelta(hours=1))
    (tmp_path / "cert.pem").write_text(certificate.cert_pem)
    (tmp_path / "key.pem").write_text(certificate.key_pem)
    serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    serving.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    received: list[tuple[str, bytes]] = []
    handler = type("Handler", (_Receiver,), {"received": received, "redirect_to": redirect_to})
    trusting = ssl.create_default_context(cadata=certificate.cert_pem)
    trusting.verify_flags &= ~ssl.VERIFY_X509_STRICT
    with served(handler, lambda sock: serving.wrap_socket(sock, server_side=True)) as port:
        yield port, received, trusting


def test_a_call_goes_to_the_checked_address_and_tls_checks_the_name(tmp_path: Path) -> None:
    with _https_receiver(tmp_path) as (port, received, trusting):
        answer = post(f"https://{RECEIVER_NAME}:{port}/hook", b'{"n": 1}', {},
                      allowed=LOOPBACK, ssl_context=trusting, resolve=_resolver("127.0.0.1"))
        assert (answer.status, answer.body) == (200, b"ok")
        assert received == [("/hook", b'{"n": 1}')]
        with pytest.raises(Exception, match=r"certificate|hostname"):
            post(f"https://other.example.com:{port}/hook", b"{}", {}, allowed=LOOPBACK,
                 ssl_context=trusting, resolve=_resolver("127.0.0.1"))
    assert len(received) == 1


def test_a_name_that_rebinds_to_a_private_address_is_refused_at_the_call(tmp_path: Path) -> None:
    with _https_receiver(tmp_path) as (port, received, trusting):
        url = f"https://{RECEIVER_NAME}:{port}/hook"
        assert checked_addresses(RECEIVER_NAME, port, resolve=_resolver("93.184.216.34"))
        with pytest.raises(Refused, match="loopback"):
            post(url, b"{}", {}, ssl_context=trusting, resolve=_resolver("127.0.0.1"))
    assert received == []


def test_a_redirect_is_answered_not_followed(tmp_path: Path) -> None:
    (tmp_path / "inner").mkdir()
    with _https_receiver(tmp_path / "inner") as (inner_port, inner_received, _):
        inner = f"https://{RECEIVER_NAME}:{inner_port}/metadata"
        with _https_receiver(tmp_path, redirect_to=inner) as (port, received, trusting):
            answer = post(f"https://{RECEIVER_NAME}:{port}/hook", b"{}", {}, allowed=LOOPBACK,
                          ssl_context=trusting, resolve=_resolver("127.0.0.1"))
    assert answer.status == 302
    assert len(received) == 1 and inner_received == []


def test_a_long_answer_is_read_only_up_to_its_bound(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbound, "ANSWER_BYTES", 1)
    with _https_receiver(tmp_path) as (port, _, trusting):
        answer = post(f"https://{RECEIVER_NAME}:{port}/hook", b"{}", {}, allowed=LOOPBACK,
                      ssl_context=trusting, resolve=_resolver("127.0.0.1"))
    assert answer.body == b"o"
