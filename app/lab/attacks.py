"""The multi-tenancy battery, in the spirit of the Kubernetes Multi-Tenancy Benchmarks: after
the three-teams walk, a tenant attacks with the kubeconfigs the portal issued it, and every
attempt is judged on the host, where a virtual cluster cannot hide anything.

The admin dedicates an H100 node to initech (the class acme holds in the shared pool, so only
isolation keeps acme off it). Then acme (shared pool), with each role the portal issues, and
initech's dedicated-nodes cluster try to reach nodes that are not theirs (toleration,
``nodeName``, selector, affinity, topology spread, pod affinity to the other team's pods, a
DaemonSet), another queue (label, annotation, ``schedulerName``, priority class), the host
(host network, PID, IPC, paths, privileged, capabilities, NodePort and LoadBalancer Services,
Endpoints and EndpointSlices aimed at the host's API server or another tenant's pod) and the
other tenant's objects through their API. A refusal by the virtual cluster or the host is a pass;
what was admitted must have landed only where it may.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from app.kube.adapter import KubernetesAdapter
from app.kube.manifests import labels as lbl
from app.kube.manifests.names import cluster_queue_name
from app.lab import demo
from app.lab.demo import H100, Portal
from app.lab.walk import DemoError, Kubectl, Report, Team, Workload

ACME, INITECH_BURST, INITECH_DEDICATED = demo.TEAMS[0], demo.TEAMS[2], demo.TEAMS[3]
# An H100 node dedicated to initech: the class acme's shared-pool cluster runs on.
TAKEN = "h100-r2-n3"
TAKEN_QUOTA = Team("initech", "Initech Labs", "h100-node", H100, 8, "dedicated-nodes",
                   Workload(pods=(), gpus_each=1))
ROLES = ("admin", "edit", "view")
SETTLE_SECONDS = 30.0
RESTRICTED = {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 1000,
              "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
EVERYTHING = [{"operator": "Exists"}]


def _container(**security: Any) -> dict[str, Any]:
    return {"name": "main", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            "securityContext": {**RESTRICTED, **security}}


def _pod(name: str, spec: Mapping[str, Any] | None = None, container: Any = None,
         labels: Mapping[str, str] | None = None,
         annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"attack": name, **(labels or {})},
                         "annotations": dict(annotations or {})},
            "spec": {"containers": [container or _container()], **(spec or {})}}


def _hostname_affinity(node: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": lbl.HOSTNAME, "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                             {"nodeSelectorTerms": [term]}}}


def node_attacks(node: str, victim: str) -> list[dict[str, Any]]:
    """Every way a pod can reach for ``node``, dedicated to tenant ``victim``."""
    own_taint = [{"key": lbl.TENANT, "operator": "Exists"}]
    victim_taint = [{"key": lbl.TENANT, "operator": "Equal", "value": victim,
                     "effect": "NoSchedule"}]
    spread = {"maxSkew": 1, "topologyKey": lbl.HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
              "labelSelector": {"matchLabels": {"attack": "spread"}}}
    pod_affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"team": victim}}, "topologyKey": lbl.HOSTNAME}]}}
    daemonset = {"apiVersion": "apps/v1", "kind": "DaemonSet",
                 "metadata": {"name": "everywhere", "namespace": "default"},
                 "spec": {"selector": {"matchLabels": {"attack": "everywhere"}},
                          "template": {"metadata": {"labels": {"attack": "everywhere"}},
                                       "spec": {"tolerations": EVERYTHING,
                                                "containers": [_container()]}}}}
    return [
        _pod("toleration", {"tolerations": own_taint, "nodeSelector": {lbl.HOSTNAME: node}}),
        _pod("nodename", {"nodeName": node}),
        _pod("selector", {"tolerations": victim_taint, "nodeSelector": {lbl.TENANT: victim}}),
        _pod("affinity", {"tolerations": own_taint, "affinity": _hostname_affinity(node)}),
        _pod("spread", {"tolerations": EVERYTHING, "topologySpreadConstraints": [spread]}),
        _pod("podaffinity", {"tolerations": EVERYTHING, "affinity": pod_affinity}),
        daemonset,
    ]


def queue_attacks(victim_queue: str) -> list[dict[str, Any]]:
    return [
        _pod("queuelabel", labels={lbl.KAI_QUEUE_LABEL: victim_queue}),
        _pod("queueannotation", annotations={lbl.KAI_QUEUE_LABEL: victim_queue}),
        _pod("defaultscheduler", {"schedulerName": "default-scheduler"}),
        _pod("otherscheduler", {"schedulerName": "volcano"}),
        _pod("priority", {"priorityClassName": "system-node-critical"}),
    ]


def host_attacks(host_address: str, victim_address: str) -> list[dict[str, Any]]:
    endpoints = {"apiVersion": "v1", "kind": "Endpoints",
                 "metadata": {"name": "sneaky", "namespace": "default"},
                 "subsets": [{"addresses": [{"ip": host_address}, {"ip": victim_address}],
                              "ports": [{"port": 6443}]}]}
    slice_ = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
              "metadata": {"name": "sneaky-slice", "namespace": "default",
                           "labels": {"kubernetes.io/service-name": "sneaky"}},
              "addressType": "IPv4", "ports": [{"port": 6443}],
              "endpoints": [{"addresses": [host_address]}, {"addresses": [victim_address]}]}
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "sneaky", "namespace": "default"},
               "spec": {"ports": [{"port": 6443}]}}
    return [
        _pod("hostnetwork", {"hostNetwork": True}),
        _pod("hostpid", {"hostPID": True}),
        _pod("hostipc", {"hostIPC": True}),
        _pod("hostpath", {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}),
        _pod("privileged", container=_container(privileged=True, runAsNonRoot=False,
                                                runAsUser=0, allowPrivilegeEscalation=True)),
        _pod("capabilities", container=_container(capabilities={"add": ["NET_ADMIN",
                                                                        "SYS_ADMIN"]})),
        *({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": f"exposed-{kind.lower()}", "namespace": "default"},
           "spec": {"type": kind, "ports": [{"port": 80}]}} for kind in ("NodePort",
                                                                          "LoadBalancer")),
        service, endpoints, slice_,
    ]


# ----- attempts, judged on the host


def attempt(kubectl: Kubectl, kubeconfig: Path, who: str, tag: str,
            manifests: list[dict[str, Any]]) -> None:
    """Apply each object on its own, its name tagged; note what the virtual cluster refused."""
    refused = []
    for each in manifests:
        manifest = {**each, "metadata": {**each["metadata"],
                                         "name": f"{each['metadata']['name']}-{tag}"}}
        try:
            kubectl.apply(kubeconfig, [manifest])
        except DemoError:
            refused.append(f"{manifest['kind']}/{manifest['metadata']['name']}")
    print(f"  {who}: {len(refused)} of {len(manifests)} refused inside the virtual cluster: "
          f"{', '.join(refused) or 'none'}", flush=True)


def may_run_on(node: Mapping[str, Any], team: Team) -> bool:
    labels = node["metadata"].get("labels") or {}
    if labels.get(lbl.GPU_PRODUCT) != team.product:
        return False
    if team.placement == "dedicated-nodes":
        return labels.get(lbl.TENANT) == team.tenant
    return labels.get(lbl.POOL) == lbl.POOL_SHARED and lbl.TENANT not in labels


def check_nodes(report: Report, host: KubernetesAdapter, team: Team) -> None:
    nodes = {n["metadata"]["name"]: n for n in host.list("v1", "Node")}
    astray = [f"{p['metadata']['name']} on {p['spec']['nodeName']}"
              for p in host.list("v1", "Pod", team.namespace)
              if p["spec"].get("nodeName") and lbl.VCLUSTER_SYNCED_MARKER in (
                  p["metadata"].get("labels") or {})
              and not may_run_on(nodes.get(p["spec"]["nodeName"], {"metadata": {}}), team)]
    report.check(f"{team.label}: on the host, every pod it placed is on a node it may use",
                 not astray, f"{astray or 'none astray'}")


def check_queue(report: Report, host: KubernetesAdapter, team: Team) -> None:
    queue = cluster_queue_name(team.tenant, team.cluster)
    wrong = [p["metadata"]["name"] for p in host.list("v1", "Pod", team.namespace)
             if lbl.VCLUSTER_SYNCED_MARKER in (p["metadata"].get("labels") or {})
             and (p["spec"].get("schedulerName") != lbl.KAI_SCHEDULER_NAME
                  or p["metadata"]["labels"].get(lbl.KAI_QUEUE_LABEL) != queue
                  or (p["spec"].get("priority") or 0) > 0)]
    report.check(f"{team.label}: on the host, every pod is KAI's, in {queue}, at no priority",
                 not wrong, f"{wrong or 'all'}")


def _escapes(pod: Mapping[str, Any]) -> list[str]:
    spec = pod["spec"]
    found = [f for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f)]
    found += [f"hostPath {v['name']}" for v in spec.get("volumes") or [] if "hostPath" in v]
    for container in spec.get("containers") or []:
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            found.append("privileged")
        found += (context.get("capabilities") or {}).get("add") or []
    return found


def check_host_reach(report: Report, host: KubernetesAdapter, team: Team,
                     forbidden: set[str]) -> None:
    escapes = {p["metadata"]["name"]: _escapes(p) for p in host.list("v1", "Pod", team.namespace)
               if lbl.VCLUSTER_SYNCED_MARKER in (p["metadata"].get("labels") or {})}
    report.check(f"{team.label}: on the host, no pod with host access",
                 not any(escapes.values()), f"{ {k: v for k, v in escapes.items() if v} }")
    exposed = [s["metadata"]["name"] for s in host.list("v1", "Service", team.namespace)
               if s["spec"].get("type") in ("NodePort", "LoadBalancer")]
    report.check(f"{team.label}: on the host, no NodePort or LoadBalancer Service",
                 not exposed, f"{exposed or 'none'}")
    aimed = sorted(_addresses(host, team.namespace) & forbidden)
    report.check(f"{team.label}: on the host, no Endpoints or EndpointSlice aimed at the host "
                 "or another tenant", not aimed, f"{aimed or 'none'}")


def _addresses(host: KubernetesAdapter, namespace: str) -> set[str]:
    found = {a["ip"] for e in host.list("v1", "Endpoints", namespace)
             for s in e.get("subsets") or [] for a in s.get("addresses") or []}
    found |= {a for s in host.list("discovery.k8s.io/v1", "EndpointSlice", namespace)
              for e in s.get("endpoints") or [] for a in e.get("addresses") or []}
    return found


def check_objects(report: Report, kubectl: Kubectl, kubeconfig: Path, team: Team,
                  other: Team) -> None:
    seen = kubectl.names(kubeconfig, "namespaces")
    pods = {p["metadata"]["name"] for p in kubectl.pods(kubeconfig, "-A")}
    leaked = sorted((pods & set(other.workload.pods)) | (seen & {other.namespace}))
    report.check(f"{team.label} reads none of {other.label}'s objects", not leaked,
                 f"{leaked or 'none'}")


# ----- the battery


def dedicate_taken_node(portal: Portal, host: KubernetesAdapter) -> None:
    demo.grant_quota(portal, TAKEN_QUOTA)
    portal.call("PUT", f"/nodes/{TAKEN}/assignment", {"tenant": "initech"},
                accept=frozenset({409}))
    demo.wait_until(lambda: _tainted(host), f"{TAKEN} to carry initech's taint", 90.0)
    print(f"node {TAKEN} dedicated to initech", flush=True)


def _tainted(host: KubernetesAdapter) -> bool:
    node = host.get("v1", "Node", TAKEN) or {}
    return any(t.get("key") == lbl.TENANT and t.get("value") == "initech"
               for t in (node.get("spec") or {}).get("taints") or [])


def _settle(done: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(2.0)


def host_address(env: Mapping[str, str]) -> str:
    config = yaml.safe_load(Path(env["HOST_KUBECONFIG"]).read_text())
    return str(urlsplit(config["clusters"][0]["cluster"]["server"]).hostname)


def victim_address(host: KubernetesAdapter, team: Team) -> str:
    ips = [p["status"].get("podIP") for p in host.list("v1", "Pod", team.namespace)
           if (p.get("status") or {}).get("podIP")]
    return str(ips[0]) if ips else "10.244.0.10"


def run(env: Mapping[str, str], folder: Path) -> Report:
    portal, host, kubectl = demo.clients(env)
    report = Report()
    try:
        print("== the admin dedicates an H100 node to initech", flush=True)
        dedicate_taken_node(portal, host)
        kubeconfig = {role: _kubeconfig(portal, ACME, role, folder) for role in ROLES}
        _settle(lambda: TAKEN not in kubectl.names(kubeconfig["admin"], "nodes"), 60.0)
        listed = TAKEN in kubectl.names(kubeconfig["admin"], "nodes")
        report.check(f"{ACME.label} lists no node dedicated to initech", not listed,
                     f"{TAKEN} {'listed' if listed else 'not listed'}")
        forbidden = {host_address(env), victim_address(host, INITECH_BURST)}
        print("== acme attacks, with each role", flush=True)
        for role in ROLES:
            attempt(kubectl, kubeconfig[role], f"{ACME.label} as {role}", role,
                    [*node_attacks(TAKEN, "initech"), *queue_attacks(
                        cluster_queue_name(INITECH_BURST.tenant, INITECH_BURST.cluster)),
                     *host_attacks(*sorted(forbidden))])
        dedicated = _kubeconfig(portal, INITECH_DEDICATED, "admin", folder)
        attempt(kubectl, dedicated, f"{INITECH_DEDICATED.label} as admin", "dedicated",
                node_attacks("h100-r1-n1", "acme"))
        time.sleep(SETTLE_SECONDS)  # the syncer, KAI and the virtual scheduler act meanwhile
        print("== on the host", flush=True)
        for team in (ACME, INITECH_DEDICATED):
            check_nodes(report, host, team)
        check_queue(report, host, ACME)
        check_host_reach(report, host, ACME, forbidden)
        check_objects(report, kubectl, kubeconfig["admin"], ACME, INITECH_BURST)
    except DemoError as error:
        report.check("the battery ran to its end", False, str(error))
    finally:
        host.close()
    return report


def _kubeconfig(portal: Portal, team: Team, role: str, folder: Path) -> Path:
    text = portal.call("POST", f"/tenants/{team.tenant}/clusters/{team.cluster}/kubeconfigs",
                       {"role": role, "lifetime_seconds": 3600})
    path = folder / f"attack-{team.tenant}-{team.cluster}-{role}.kubeconfig"
    path.write_text(text)
    path.chmod(0o600)
    return path
