"""The rule for PORTAL_PROMETHEUS_URL: the base address of the operator's Prometheus HTTP API
(the portal adds ``/api/v1/query``), like the webhook's address checked before it is used."""

from __future__ import annotations

from app.kit.base_url import base_url_problem


def prometheus_url_problem(url: str) -> str | None:
    """Why the portal could not query Prometheus at base address ``url`` (None: it can)."""
    return base_url_problem(url, schemes=("http", "https"), added_path="/api/v1")
