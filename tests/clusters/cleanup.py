"""What a test's tenant makes on the shared host API server, and removing what it left."""

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


def own_objects(slug: str) -> list[tuple[str, str, str, str | None]]:
    """(apiVersion, kind, name, namespace) of what the portal makes for cluster ``train``."""
    namespace = f"t-{slug}--train"
    return [
        ("v1", "Namespace", namespace, None),
        ("v1", "ResourceQuota", "tenant-quota", namespace),
        ("v1", "LimitRange", "tenant-defaults", namespace),
        ("networking.k8s.io/v1", "NetworkPolicy", "tenant-isolation", namespace),
        ("networking.k8s.io/v1", "NetworkPolicy", "vcluster-api-server", namespace),
        (lbl.KAI_API_VERSION, "Queue", slug, None),
        (lbl.KAI_API_VERSION, "Queue", f"{slug}--train", None),
    ]
