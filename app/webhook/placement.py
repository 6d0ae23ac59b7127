"""Which synced pods the webhook refuses for reaching past their tenant's nodes.

The same rules as the host's tenancy guard (app/kube/manifests/tenancy.py), said in the pod's own
words where the webhook is called: no blanket toleration; the tenant taint tolerated only
``Equal`` to the namespace's own tenant, and only in a dedicated-nodes cluster; no node selector
or node affinity on the tenant label for another tenant (a shared-pool pod: none at all); no
``spec.nodeName`` on a shared-pool pod at creation. Naming another tenant's node by host name
needs the host's nodes: the dedicated-node guard, which takes them as parameters, refuses that.

Pure: the namespace's labels are passed in.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from app.kube.manifests import labels as lbl


def tenant_of(namespace_labels: Mapping[str, str] | None) -> str | None:
    """The tenant of a portal-managed tenant namespace; None for any other namespace."""
    labels = namespace_labels or {}
    if labels.get(lbl.MANAGED_BY) != lbl.MANAGED_BY_VALUE:
        return None
    return labels.get(lbl.TENANT) or None


def placement_refusal(pod: Mapping[str, Any], namespace_labels: Mapping[str, str] | None,
                      operation: str) -> str | None:
    """Why the pod may not be admitted into this tenant namespace, or None."""
    tenant = tenant_of(namespace_labels)
    if tenant is None:
        return None
    shared = (namespace_labels or {}).get(lbl.PLACEMENT) == "shared-pool"
    spec = pod.get("spec") or {}
    return (_toleration_refusal(spec, tenant, shared)
            or _selector_refusal(spec, tenant, shared)
            or _node_name_refusal(spec, shared, operation))


def _toleration_refusal(spec: Mapping[str, Any], tenant: str, shared: bool) -> str | None:
    for toleration in spec.get("tolerations") or []:
        key = toleration.get("key") or ""
        if not key:
            return ("this pod tolerates every taint (a toleration without a key); a tenant's "
                    "pods may not tolerate other tenants' dedicated nodes")
        if key != lbl.TENANT:
            continue
        if shared:
            return (f"this shared-pool pod tolerates the {lbl.TENANT} taint; shared-pool pods "
                    "run on the shared pool, never on dedicated nodes")
        equal = (toleration.get("operator") or "Equal") == "Equal"
        if not equal or toleration.get("value") != tenant:
            return (f"this pod tolerates the {lbl.TENANT} taint beyond its own tenant "
                    f"{tenant!r}; other tenants' dedicated nodes are not for it")
    return None


def _selector_refusal(spec: Mapping[str, Any], tenant: str, shared: bool) -> str | None:
    selected = (spec.get("nodeSelector") or {}).get(lbl.TENANT)
    named = [] if selected is None else [str(selected)]
    for expression in _tenant_expressions(spec):
        operator = expression.get("operator")
        if operator in ("NotIn", "DoesNotExist"):
            continue
        if operator != "In":
            return (f"this pod's node affinity matches every node with the {lbl.TENANT} "
                    f"label ({operator}); a tenant's pods may select only their own")
        named += [str(v) for v in expression.get("values") or []]
    foreign = sorted({n for n in named if shared or n != tenant})
    if foreign:
        whose = "dedicated nodes" if shared else "nodes of another tenant"
        return (f"this pod selects {whose} by the {lbl.TENANT} label ({', '.join(foreign)}); "
                "a tenant's pods may select only their own tenant's nodes, and shared-pool "
                "pods none")
    return None


def _tenant_expressions(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    terms = [*(required.get("nodeSelectorTerms") or []),
             *((p.get("preference") or {}) for p in preferred)]
    for term in terms:
        for expression in term.get("matchExpressions") or []:
            if expression.get("key") == lbl.TENANT:
                yield expression


def _node_name_refusal(spec: Mapping[str, Any], shared: bool, operation: str) -> str | None:
    if shared and operation == "CREATE" and spec.get("nodeName"):
        return (f"this shared-pool pod names its node ({spec['nodeName']}); shared-pool pods "
                f"are placed by {lbl.KAI_SCHEDULER_NAME} in their queue")
    return None
