"""Pods of other tenants on a node dedicated to a tenant: evicted.

A node dedicated while pods of other tenants run on it (bound when it was in the shared pool,
or a dedicated cluster's pods when it changed hands) keeps them: a ``NoSchedule`` taint only
stops new placements. The dedication promises the tenant the whole node, so the worker deletes
them; their virtual clusters see the pods gone, and controllers make new ones, which the taint
and the host's tenancy guards keep off the node (they land in their own pool or wait). We chose
this over holding the dedication until the node drains by itself: a training job can run for
days, and the tenant's quota was approved for the node now. Pods outside tenant namespaces (the
host's own daemons) are never touched.

Level-triggered: each pass lists the pods of every dedicated node (field selector
``spec.nodeName``, one list a node) and the tenant namespaces (one list), so an eviction that
failed is tried again at the next pass.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from app.kube.errors import KubeError
from app.kube.manifests import labels as lbl
from app.kube.port import KubePort, Manifest

log = logging.getLogger(__name__)


def dedicated_nodes(nodes: list[Manifest]) -> dict[str, str]:
    """Each node dedicated to a tenant on the host, by its tenant label."""
    found: dict[str, str] = {}
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if labels.get(lbl.TENANT):
            found[str(node["metadata"]["name"])] = str(labels[lbl.TENANT])
    return found


def strangers(pods: list[Manifest], namespaces: Mapping[str, Mapping[str, str]],
              tenant: str) -> list[tuple[str, str]]:
    """(namespace, name) of the pods in tenant namespaces that may not run on a node dedicated
    to ``tenant``: everything but ``tenant``'s own dedicated-nodes clusters."""
    found = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = namespaces.get(str(meta.get("namespace")))
        if labels is None or not labels.get(lbl.TENANT):
            continue  # not a tenant namespace
        own = labels[lbl.TENANT] == tenant and labels.get(lbl.PLACEMENT) == "dedicated-nodes"
        if not own:
            found.append((str(meta["namespace"]), str(meta["name"])))
    return found


def evict_strangers(host: KubePort, dedicated: Mapping[str, str]) -> list[tuple[str, str]]:
    """Delete other tenants' pods from each dedicated node; the pods deleted. Raises the first
    ``KubeError`` after trying every node, so one failure does not spare the others."""
    if not dedicated:
        return []
    namespaces = {str(n["metadata"]["name"]): dict(n["metadata"].get("labels") or {})
                  for n in host.list("v1", "Namespace",
                                     label_selector={lbl.MANAGED_BY: lbl.MANAGED_BY_VALUE})}
    evicted: list[tuple[str, str]] = []
    first_error: KubeError | None = None
    for node, tenant in sorted(dedicated.items()):
        try:
            pods = host.list("v1", "Pod", field_selector={"spec.nodeName": node})
            for namespace, name in strangers(pods, namespaces, tenant):
                host.delete("v1", "Pod", name, namespace)
                log.warning("evicted pod %s/%s from node %s, dedicated to %s", namespace,
                            name, node, tenant)
                evicted.append((namespace, name))
        except KubeError as error:
            first_error = first_error or error
    if first_error is not None:
        raise first_error
    return evicted
