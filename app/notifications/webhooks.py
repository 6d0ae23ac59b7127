"""Delivering one notification to one webhook endpoint: its body in the endpoint's format,
signed (``signing.py``), posted through the outbound check (``app/kit/outbound.py``: the
address checked after DNS and pinned, no redirect followed), the answer classified.

2xx delivered; 408, 409, 425, 429, 5xx, a timeout or a broken connection worth another try; a
redirect, any other 4xx or an address the portal does not call will not work by trying again.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import httpcore
import httpx

from app.kit import outbound
from app.notifications import signing
from app.notifications.messages import Event, WebhookBody, cloudevent_body, slack_body
from app.notifications.outcomes import Outcome, Sent, bounded

Format = Literal["slack", "cloudevents"]
USER_AGENT = "gpu-tenant-portal-webhooks/1"
RETRIED_STATUSES = frozenset({408, 409, 425, 429})
_ANSWER_SHOWN = 200
# What the outbound check says of a name it could not resolve (now): unlike an address it
# refuses, a resolver may answer next time.
_UNRESOLVED = ("does not resolve", "did not resolve")


@dataclass(frozen=True)
class Endpoint:
    url: str
    format: Format
    # The current secret first, then a rolled secret's predecessor while it overlaps.
    secrets: tuple[str, ...] = field(repr=False)


@dataclass(frozen=True)
class Network:
    """Where the portal may call (the operator's settings) and how."""

    allowed: Sequence[outbound.IPNetwork] = ()
    http_hosts: Collection[str] = ()
    ssl_context: ssl.SSLContext | None = None
    resolve: outbound.Resolver = socket.getaddrinfo


def body_for(endpoint: Endpoint, event: Event, *, base_url: str) -> WebhookBody:
    if endpoint.format == "slack":
        return slack_body(event, base_url=base_url)
    return cloudevent_body(event, base_url=base_url)


def request_for(endpoint: Endpoint, event: Event, *, base_url: str, now: datetime
                ) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one attempt, signed at ``now``."""
    rendered = body_for(endpoint, event, base_url=base_url)
    headers = {"Content-Type": rendered.content_type, "User-Agent": USER_AGENT}
    headers |= signing.signed_headers(event.uid, int(now.timestamp()), rendered.body,
                                      endpoint.secrets)
    return rendered.body, headers


def deliver(endpoint: Endpoint, event: Event, *, base_url: str, now: datetime,
            network: Network | None = None) -> Sent:
    """Posts ``event`` to ``endpoint`` once and says what became of it; never raises for
    anything the receiver or the network does."""
    network = network or Network()
    body, headers = request_for(endpoint, event, base_url=base_url, now=now)
    try:
        answer = outbound.post(endpoint.url, body, headers, allowed=network.allowed,
                               http_hosts=network.http_hosts, ssl_context=network.ssl_context,
                               resolve=network.resolve)
    except outbound.Refused as refused:
        if any(words in str(refused) for words in _UNRESOLVED):
            return Sent(Outcome.RETRY, bounded(str(refused)))
        return Sent(Outcome.PERMANENT, bounded(str(refused)), refused_address=True)
    except (httpx.HTTPError, httpcore.TimeoutException, httpcore.NetworkError,
            httpcore.ProtocolError, OSError) as failed:
        # The pinned transport speaks httpcore directly: its errors arrive unwrapped.
        return Sent(Outcome.RETRY, bounded(f"the call failed: {_reason(failed)}"))
    return classified(answer.status, answer.body)


def classified(status: int, body: bytes = b"") -> Sent:
    """A receiver's answer as a result."""
    said = bounded(body.decode("utf-8", "replace"), _ANSWER_SHOWN)
    detail = bounded(f"HTTP {status}" + (f": {said}" if said else ""))
    if 200 <= status <= 299:
        return Sent(Outcome.DELIVERED, detail)
    if 300 <= status <= 399:
        return Sent(Outcome.PERMANENT, bounded(
            f"HTTP {status}: redirects are not followed; register the address it points to"))
    if status in RETRIED_STATUSES or 500 <= status <= 599:
        return Sent(Outcome.RETRY, detail)
    return Sent(Outcome.PERMANENT, detail)


def _reason(failure: BaseException) -> str:
    return str(failure) or type(failure).__name__
