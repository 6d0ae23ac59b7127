"""Who is calling, as far as the network says: the client address limits and audit rows use.

The address is the ASGI scope's client. ``portal serve`` has uvicorn replace it with the one in
``X-Forwarded-For`` only when the connection comes from ``PORTAL_TRUSTED_PROXIES``, so a caller
cannot pick the address it is counted under by sending the header itself.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from starlette.types import Scope

UNKNOWN_CLIENT = "unknown"
# An IPv6 subscriber usually holds a whole /64: counted per address, one machine would be
# millions of clients.
IPV6_CLIENT_PREFIX = 64


def client_address(scope: Scope) -> str:
    """The caller's address; an IPv6 caller as its /64 network."""
    client = scope.get("client")
    if not client or not client[0]:
        return UNKNOWN_CLIENT
    return _counted_as(client[0])


@lru_cache(maxsize=4096)
def _counted_as(host: str) -> str:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host  # not an IP (a test client, a Unix socket): counted as it is named
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{address}/{IPV6_CLIENT_PREFIX}", strict=False))
    return str(address)
