"""The one rule for a base address the portal calls or hands out (a webhook's, Prometheus'):
a URL to which the portal adds its own path, so it must carry no path of its own below it, no
query, no fragment and no credentials."""

from __future__ import annotations

from urllib.parse import urlsplit


def base_url_problem(url: str, *, schemes: tuple[str, ...], added_path: str) -> str | None:
    """Why ``url`` is not a usable base address (None: it is); ``added_path`` is the path the
    portal adds, refused inside the base address."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return "is not a URL"
    if parts.scheme not in schemes:
        return "must start with " + " or ".join(f"{scheme}://" for scheme in schemes)
    if not parts.hostname:
        return "names no host"
    # A password in the URL would be logged with every failed call.
    if parts.username is not None or parts.password is not None:
        return "must not carry a user name or password"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "must not carry a query or a fragment"
    if added_path in parts.path:
        return (f"must be the base address, without {added_path}: the portal adds the path "
                f"(e.g. {parts.scheme}://{parts.netloc})")
    return None
