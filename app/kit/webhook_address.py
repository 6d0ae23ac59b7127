"""The one rule for a webhook address (PORTAL_WEBHOOK_URL and each host's webhook URL): the
https:// base address at which an API server reaches `portal webhook`; the portal adds the
path itself (``/mutate-pods``, or ``/mutate-pods/hosts/<id>`` for a registered host)."""

from __future__ import annotations

from app.kit.base_url import base_url_problem

WEBHOOK_PATH = "/mutate-pods"


def webhook_url_problem(url: str) -> str | None:
    """Why the API server could not call the webhook at base address ``url`` (None: it can)."""
    return base_url_problem(url, schemes=("https",), added_path=WEBHOOK_PATH)


def called_url(base_url: str, path: str = WEBHOOK_PATH) -> str:
    """The URL an API server calls: the base address and the portal's path."""
    return base_url.rstrip("/") + path
