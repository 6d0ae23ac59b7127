"""What the walk checks of the tenants' isolation and of their clusters' own health: nobody
else's pods on dedicated nodes, nobody sees another team's pods, nodes or namespaces, and every
cluster's own system pods (CoreDNS) run."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.kube.adapter import KubernetesAdapter
from app.kube.manifests import labels as lbl

if TYPE_CHECKING:
    from app.lab.walk import Kubectl, Report, Team

SYSTEM_PODS_TIMEOUT = 120.0


def check_dedicated_nodes_alone(report: Report, host: KubernetesAdapter, owner: Team,
                                dedicated: Collection[str]) -> None:
    strangers = [f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                 for p in host.list("v1", "Pod")
                 if p["spec"].get("nodeName") in dedicated
                 and p["metadata"]["namespace"] != owner.namespace]
    report.check(f"no other tenant's pod on {owner.tenant}'s dedicated nodes", not strangers,
                 f"{strangers or 'none'}")


def check_isolation(report: Report, kubectl: Kubectl, seen_by: Team, kubeconfig: Path,
                    other: Team, node_products: Mapping[str, str]) -> None:
    pods = {p["metadata"]["name"] for p in kubectl.pods(kubeconfig, "-A")}
    theirs = set(other.workload.pods)
    report.check(f"{seen_by.tenant} sees none of {other.tenant}'s pods", not (pods & theirs),
                 f"{sorted(pods & theirs) or 'none'}")
    nodes = kubectl.names(kubeconfig, "nodes")
    foreign = {n for n in nodes if node_products.get(n) not in (seen_by.product, None)}
    report.check(f"{seen_by.tenant} sees only its class's nodes", not foreign,
                 f"{len(nodes)} nodes, foreign: {sorted(foreign) or 'none'}")
    namespaces = kubectl.names(kubeconfig, "namespaces")
    report.check(f"{seen_by.tenant} sees none of {other.tenant}'s host namespaces",
                 other.namespace not in namespaces, f"{sorted(namespaces)}")


def dedicated_nodes(host: KubernetesAdapter) -> dict[str, str]:
    """Each node of the host dedicated to a tenant, with its tenant."""
    found = {}
    for node in host.list("v1", "Node"):
        tenant = (node["metadata"].get("labels") or {}).get(lbl.TENANT)
        if tenant:
            found[str(node["metadata"]["name"])] = str(tenant)
    return found


def check_shared_pools_list_no_dedicated_node(report: Report, host: KubernetesAdapter,
                                              kubectl: Kubectl,
                                              kubeconfigs: Mapping[Team, Path]) -> None:
    """A shared-pool cluster lists the shared pool only: no node dedicated to anybody."""
    dedicated = dedicated_nodes(host)
    for team, kubeconfig in kubeconfigs.items():
        if team.placement == "shared-pool":
            seen = sorted(kubectl.names(kubeconfig, "nodes") & set(dedicated))
            report.check(f"{team.label} lists no dedicated node", not seen,
                         f"{seen or 'none'}")


def not_running(pods: list[dict[str, Any]]) -> list[str]:
    """``name: phase (reason)`` of each pod that is not Running with every container ready."""
    found = []
    for pod in pods:
        status = pod.get("status") or {}
        ready = all(c.get("ready") for c in status.get("containerStatuses") or [{}])
        if status.get("phase") != "Running" or not ready:
            reasons = [c.get("message") or c.get("reason") or ""
                       for c in status.get("conditions") or [] if c.get("status") != "True"]
            found.append(f"{pod['metadata']['name']}: {status.get('phase')} "
                         f"({'; '.join(r for r in reasons if r) or 'not ready'})")
    return found


def check_system_pods(report: Report, kubectl: Kubectl, kubeconfigs: Mapping[Team, Path],
                      timeout: float = SYSTEM_PODS_TIMEOUT) -> None:
    """Every pod of every cluster's own kube-system (CoreDNS) Running, through the team's own
    kubeconfig: a cluster without DNS fails its tenants' workloads in ways they cannot see."""
    deadline = time.monotonic() + timeout
    for team, kubeconfig in kubeconfigs.items():
        while True:
            pods = kubectl.pods(kubeconfig, "-n", "kube-system")
            stuck = not_running(pods)
            if (pods and not stuck) or time.monotonic() > deadline:
                break
            time.sleep(2.0)
        report.check(f"{team.label}: every kube-system pod Running",
                     bool(pods) and not stuck,
                     f"{len(pods)} pods; {'; '.join(stuck) or 'all Running'}")
