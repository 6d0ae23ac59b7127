"""Dedicated-node assignment as a partial Node for server-side apply.

Node.spec.taints is an atomic list under server-side apply: whoever applies it sets the whole
list. So the patch carries the node's other taints unchanged, and callers should pass the
resourceVersion they read them at, which makes the apply fail with 409 instead of silently
dropping a taint that another controller added in between.
"""

from typing import Any

from app.kube.manifests import labels as lbl
from app.kube.manifests.names import is_dns_label

Manifest = dict[str, Any]


def tenant_taint(tenant_slug: str) -> dict[str, str]:
    return {"key": lbl.TENANT, "value": tenant_slug, "effect": "NoSchedule"}


def node_labels(tenant_slug: str | None) -> dict[str, str]:
    """The portal's labels on a GPU node: its tenant's, or the shared pool's."""
    return {lbl.TENANT: tenant_slug} if tenant_slug is not None else {lbl.POOL: lbl.POOL_SHARED}


def node_tenant_patch(
    node_name: str,
    tenant_slug: str | None,
    existing_taints: list[dict[str, Any]],
    resource_version: str | None = None,
) -> Manifest:
    """Assign the node to `tenant_slug`, or with None end the assignment: the node is then in
    the shared pool and labelled so (``gpu-tenant-portal/pool=shared``), which is what a
    shared-pool cluster's node sync selects on.

    Labels are a granular map, so applying only our label never touches the others, and leaving
    it out of a later apply by the same field manager removes it.
    """
    if tenant_slug is not None and not is_dns_label(tenant_slug):
        raise ValueError(f"tenant slug is not a DNS-1123 label: {tenant_slug!r}")
    taints = [dict(t) for t in existing_taints if t.get("key") != lbl.TENANT]
    metadata: Manifest = {"name": node_name, "labels": node_labels(tenant_slug)}
    if tenant_slug is not None:
        taints.append(tenant_taint(tenant_slug))
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": {"taints": taints}}
