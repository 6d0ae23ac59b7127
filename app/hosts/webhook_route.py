"""Where a host's API server calls the portal's admission webhook.

One rule for every address (app/kit/webhook_address.py): an admin gives the https:// base
address, the portal adds the path. The environment's host calls ``<PORTAL_WEBHOOK_URL>/mutate-pods``
(without PORTAL_WEBHOOK_URL, the in-cluster Service at ``/mutate-pods``), and the webhook reads
namespaces with the environment's credentials. Any host with a ``webhook_url`` calls
``<webhook_url>/mutate-pods/hosts/<host id>``: the path tells the webhook which host's
namespaces to read (the id, not the name: a rename does not break calls in flight). A host
other than the environment's without one gets no webhook.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from app.kit.config import Settings
from app.kit.webhook_address import called_url
from app.kit.webhook_address import webhook_url_problem as webhook_url_problem
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
        return WebhookRoute(called_url(target.webhook_url, host_path(target.host_id)))
    if target.from_environment:
        return environment_route(settings)
    return None


def environment_route(settings: Settings) -> WebhookRoute:
    """The environment's host: PORTAL_WEBHOOK_URL and the path, else the in-cluster Service."""
    return WebhookRoute(called_url(settings.webhook_url) if settings.webhook_url else None)


def routed(target: HostTarget) -> bool:
    return bool(target.webhook_url) or target.from_environment
