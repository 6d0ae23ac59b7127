"""The one rule for a webhook address (PORTAL_WEBHOOK_URL and each host's webhook URL): the
https:// base address at which an API server reaches `portal webhook`; the portal adds the
path itself (``/mutate-pods``, or ``/mutate-pods/hosts/<id>`` for a registered host)."""

from __future__ import annotations

from urllib.parse import urlsplit

WEBHOOK_PATH = "/mutate-pods"


def webhook_url_problem(url: str) -> str | None:
    """Why the API server could not call the webhook at base address ``url`` (None: it can)."""
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
    if WEBHOOK_PATH in parts.path:
        return (
            f"must be the base address, without {WEBHOOK_PATH}: the portal adds the path "
            f"(e.g. https://{parts.netloc})"
        )
    return None


def called_url(base_url: str, path: str = WEBHOOK_PATH) -> str:
    """The URL an API server calls: the base address and the portal's path."""
    return base_url.rstrip("/") + path
