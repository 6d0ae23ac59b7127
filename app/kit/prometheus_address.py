"""The rule for PORTAL_PROMETHEUS_URL: the base address of the operator's Prometheus HTTP API
(the portal adds ``/api/v1/query``), like the webhook's address checked before it is used."""

from __future__ import annotations

from urllib.parse import urlsplit


def prometheus_url_problem(url: str) -> str | None:
    """Why the portal could not query Prometheus at base address ``url`` (None: it can)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return "is not a URL"
    if parts.scheme not in ("http", "https"):
        return "must start with http:// or https://"
    if not parts.hostname:
        return "names no host"
    # A password in the URL would be logged with every failed query.
    if parts.username is not None or parts.password is not None:
        return "must not carry a user name or password"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "must not carry a query or a fragment"
    if "/api/v1" in parts.path:
        return (f"must be the base address, without /api/v1: the portal adds the path "
                f"(e.g. {parts.scheme}://{parts.netloc})")
    return None
