"""Where a host's API server calls the portal's admission webhook.

The environment's host calls it as before: PORTAL_WEBHOOK_URL, else the in-cluster Service,
at ``/mutate-pods``, and the webhook reads namespaces with the environment's credentials.
Any host with a ``webhook_url`` calls ``<webhook_url>/mutate-pods/hosts/<host id>``: the path
tells the webhook which host's namespaces to read (the id, not the name: a rename does not
break calls in flight). A host other than the environment's without one gets no webhook.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from app.kit.config import Settings
from app.kube.connector import HostTarget
from app.kube.manifests.admission import WEBHOOK_PATH

HOST_PATH_PREFIX = f"{WEBHOOK_PATH}/hosts/"
MAX_WEBHOOK_URL = 500


@dataclass(frozen=True)
class WebhookRoute:
    """``url`` None: the in-cluster Service (PORTAL_WEBHOOK_SERVICE_NAME/_NAMESPACE)."""

    url: str | None

    @property
    def hostname(self) -> str | None:
        return urlsplit(self.url).hostname if self.url else None


def webhook_url_problem(url: str) -> str | None:
    """Why the API server could not call ``url`` as a webhook (None when it can)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return "is not a URL"
    if parts.scheme != "https":
        return "must start with https://"
    if not parts.hostname:
        return "names no host"
    if parts.username is not None or parts.password is not None:
        return "must not carry a user name or password"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "must not carry a query or a fragment"
    return None


def host_path(host_id: int) -> str:
    return f"{HOST_PATH_PREFIX}{host_id}"


def host_id_of(path: str) -> int | None:
    """The host id a webhook path names; None for another path."""
    if not path.startswith(HOST_PATH_PREFIX):
        return None
    tail = path[len(HOST_PATH_PREFIX):]
    return int(tail) if tail.isdigit() and len(tail) <= 18 else None


def route_of(target: HostTarget, settings: Settings) -> WebhookRoute | None:
    """How ``target``'s API server reaches the webhook; None: it cannot (no URL set)."""
    if target.webhook_url:
        return WebhookRoute(target.webhook_url.rstrip("/") + host_path(target.host_id))
    if target.from_environment:
        return WebhookRoute(settings.webhook_url)
    return None


def routed(target: HostTarget) -> bool:
    return bool(target.webhook_url) or target.from_environment
