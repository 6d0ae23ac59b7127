"""Calls to addresses that users give the portal (webhook endpoints), made safe against SSRF.

A user-given URL may name the portal's own network: loopback, the cloud's metadata service
(169.254.169.254, fd00:ec2::254, 100.100.100.200), a private range, or a name that resolves to
one. Such an address is refused unless the operator allows its network, and it is checked
after DNS resolution on every call, not only when the URL was registered: a name can resolve
to a public address at registration and to 10.0.0.1 an hour later (DNS rebinding). The checked
address is then the one connected to (pinned), so the name cannot be resolved a second time to
something else between the check and the connection; TLS still checks the certificate against
the name. Redirects are never followed: a 3xx answer is the receiver's failure.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[..., list[tuple[Any, ...]]]

MAX_URL_LENGTH = 2048
RESOLVE_SECONDS = 5.0
CONNECT_SECONDS = 5.0
CALL_SECONDS = 10.0
ANSWER_BYTES = 64 * 1024

# NAT64's well-known prefix carries an IPv4 address in its last 32 bits.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Named because "not a public address" would not tell an operator why 169.254.169.254 is out.
_METADATA = ipaddress.ip_network("169.254.169.254/32")
_SHARED = ipaddress.ip_network("100.64.0.0/10")
# One thread resolves at a time per call; getaddrinfo has no timeout of its own.
_resolver_threads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="outbound-resolve")


class Refused(ValueError):
    """The portal will not call this address; the message says why, in words for the user."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


def url_problem(url: str, *, http_hosts: Collection[str] = ()) -> str | None:
    """Why ``url`` cannot be a webhook endpoint by its form alone (None: it can be)."""
    if len(url) > MAX_URL_LENGTH:
        return f"is longer than {MAX_URL_LENGTH} characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return "is not a URL"
    plain_http_allowed = (parts.scheme == "http" and (parts.hostname or "").lower()
                          in {host.lower() for host in http_hosts})
    if parts.scheme != "https" and not plain_http_allowed:
        return "must start with https://"
    if not parts.hostname:
        return "names no host"
    if parts.username is not None or parts.password is not None:
        return "must not carry a user name or password (the portal signs each request instead)"
    if parts.fragment or url.endswith("#"):
        return "must not carry a fragment"
    return None


def address_problem(address: IPAddress, allowed: Iterable[IPNetwork] = ()) -> str | None:
    """Why the portal will not connect to ``address`` (None: it will)."""
    inner = _unwrapped(address)
    if any(inner in network or address in network for network in allowed):
        return None
    if inner.is_loopback:
        return f"{address} is a loopback address"
    if inner in _METADATA:
        return f"{address} is the cloud metadata address"
    if inner.is_link_local:
        return f"{address} is a link-local address"
    if inner.is_unspecified or inner.is_multicast or inner.is_reserved:
        return f"{address} is not a unicast address"
    if inner.is_private or inner in _SHARED:
        return f"{address} is a private address"
    if not inner.is_global:
        return f"{address} is not a public address"
    return None


def checked_addresses(host: str, port: int, *, allowed: Sequence[IPNetwork] = (),
                      resolve: Resolver = socket.getaddrinfo) -> list[IPAddress]:
    """Every address ``host`` resolves to, when every one of them may be called.

    All must pass, not one: a name answering both a public and a private address would
    otherwise reach the private one on the next resolution."""
    addresses = _resolved(host, port, resolve)
    for address in addresses:
        problem = address_problem(address, allowed)
        if problem:
            shown = "" if _literal(host) else f"{host} resolves to "
            raise Refused(f"{shown}{problem}; the portal does not call such addresses")
    return addresses


def post(url: str, body: bytes, headers: dict[str, str], *, allowed: Sequence[IPNetwork] = (),
         http_hosts: Collection[str] = (), ssl_context: ssl.SSLContext | None = None,
         resolve: Resolver = socket.getaddrinfo) -> Answer:
    """POST ``body`` to ``url`` after checking its address, connected to the checked address.

    Raises :class:`Refused` for an address the portal does not call, ``httpx.HTTPError`` for a
    call that failed; the answer's body is read up to ``ANSWER_BYTES``."""
    problem = url_problem(url, http_hosts=http_hosts)
    if problem:
        raise Refused(f"the URL {problem}")
    parts = urlsplit(url)
    assert parts.hostname is not None  # url_problem refused a URL without one
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = checked_addresses(parts.hostname, port, allowed=allowed, resolve=resolve)[0]
    context = ssl_context or ssl.create_default_context()
    timeout = httpx.Timeout(CALL_SECONDS, connect=CONNECT_SECONDS)
    with httpx.Client(transport=PinnedTransport(address, context), timeout=timeout,
                      follow_redirects=False, trust_env=False) as client:
        answer = client.post(url, content=body, headers=headers)
        return Answer(answer.status_code, answer.content)


class PinnedTransport(httpx.BaseTransport):
    """An HTTP transport that connects to one address whatever the URL's host resolves to."""

    def __init__(self, address: IPAddress, ssl_context: ssl.SSLContext) -> None:
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context, max_connections=1, retries=0,
            network_backend=_PinnedBackend(str(address)))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        answer = self._pool.handle_request(httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=request.url.raw_scheme, host=request.url.raw_host,
                             port=request.url.port, target=request.url.raw_path),
            headers=request.headers.raw, content=request.stream,
            extensions=request.extensions))
        try:
            body = _read_at_most(answer.iter_stream(), ANSWER_BYTES)
        finally:
            answer.close()
        # The body may be cut at ANSWER_BYTES: never decode it, a cut gzip stream would fail.
        headers = [(name, value) for name, value in answer.headers
                   if name.lower() != b"content-encoding"]
        return httpx.Response(answer.status, headers=headers, content=body)

    def close(self) -> None:
        self._pool.close()


class _PinnedBackend(httpcore.SyncBackend):
    def __init__(self, address: str) -> None:
        self._address = address

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return super().connect_tcp(self._address, port, timeout, local_address, socket_options)


def _read_at_most(chunks: Iterable[bytes], limit: int) -> bytes:
    kept = bytearray()
    for chunk in chunks:
        kept += chunk[:limit - len(kept)]
        if len(kept) >= limit:
            break
    return bytes(kept)


def _resolved(host: str, port: int, resolve: Resolver) -> list[IPAddress]:
    literal = _literal(host)
    if literal is not None:
        return [literal]
    future = _resolver_threads.submit(resolve, host, port, 0, socket.SOCK_STREAM)
    try:
        found = future.result(timeout=RESOLVE_SECONDS)
    except FutureTimeout:
        raise Refused(f"{host} did not resolve within {RESOLVE_SECONDS:g} s") from None
    except OSError:
        raise Refused(f"{host} does not resolve") from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(entry[4][0].split("%")[0])
                                   for entry in found))
    if not addresses:
        raise Refused(f"{host} does not resolve")
    return addresses


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _unwrapped(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 address carries (mapped, compatible, 6to4, NAT64), else itself."""
    if not isinstance(address, ipaddress.IPv6Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (int(address) >> 32 == 0 and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def networks(entries: Iterable[str]) -> list[IPNetwork]:
    """Operator-given CIDRs (``PORTAL_NOTIFY_WEBHOOK_ALLOWED_NETWORKS``) as networks."""
    return [ipaddress.ip_network(entry.strip(), strict=False) for entry in entries if entry.strip()]
