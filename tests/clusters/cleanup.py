"""Removing what a test's tenant left on the shared host API server."""

from __future__ import annotations

from app.kube.manifests import labels as lbl
from app.kube.port import KubePort


def remove_tenant_objects(host: KubePort, slug: str) -> None:
    """Deletes the tenant's namespaces and queues (the servers are shared by the whole run)."""
    selector = {lbl.TENANT: slug}
    for namespace in host.list("v1", "Namespace", label_selector=selector):
        host.delete("v1", "Namespace", namespace["metadata"]["name"])
    for queue in host.list(lbl.KAI_API_VERSION, "Queue", label_selector=selector):
        host.delete(lbl.KAI_API_VERSION, "Queue", queue["metadata"]["name"])
