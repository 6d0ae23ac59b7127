"""The fourth team on a running lab (issue 57): a cluster on private nodes.

The admin registers two spare machines of the lab (8 H100s each); umbrella gets quota for
their GPUs and creates a cluster with placement ``private-nodes``; the portal provisions both
machines with user data naming the virtual cluster's endpoint, and they join it. With the
kubeconfig the portal issues, the team applies GPU pods; the checks read the team's cluster,
the host and another team's cluster, as in ``app.lab.demo``. Then the cluster is deleted and
the machines go back to the pool, deprovisioned.

What only the lab's process holds (the kubelets' issued certificates) is checked by
``tests/lab/test_private_nodes.py``; the host refusing the bootstrap token is checked here.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

from app.kube.adapter import KubernetesAdapter
from app.lab import attacks, demo
from app.lab.kubelet_bootstrap import read_bootstrap_kubeconfig
from app.lab.machines import MACHINES_NAMESPACE, boot_config
from app.lab.metal3 import METAL3_API
from app.lab.walk import DemoError, Kubectl, Report, Team, Workload

# Spare machines of the lab's table (app/lab/machines.py) no other walk uses.
MACHINES = {"spare-h100-03": "52:54:00:a1:00:03", "spare-h100-04": "52:54:00:a1:00:04"}
TEAM = Team("umbrella", "Umbrella Robotics", "fleet", demo.H100, 16, "private-nodes",
            Workload(pods=("policy-0", "policy-1"), gpus_each=8))
JOIN_TIMEOUT = 300.0
ATTACK_SETTLE_SECONDS = 20.0
RELEASE_TIMEOUT = 240.0
TOKEN_TYPE = "bootstrap.kubernetes.io/token"  # noqa: S105 (a Secret type)


def with_three_teams(env: Mapping[str, str], folder: Path) -> Report:
    """``make lab-demo``: the three teams, then the fourth, in one report."""
    report = demo.run(env, folder)
    report.checks += run(env, folder).checks
    return report


def run(env: Mapping[str, str], folder: Path, other: Team = demo.TEAMS[0],
        before_release: Callable[[set[str]], None] | None = None) -> Report:
    """The walk; ``before_release`` is given the private nodes' names while they serve."""
    portal, host, kubectl = demo.clients(env)
    folder.mkdir(parents=True, exist_ok=True)
    report = Report()
    try:
        print("== the admin registers two spare machines; umbrella creates a private-nodes "
              "cluster", flush=True)
        register(portal)
        demo.wait_until(lambda: phases(portal, "available"), "both machines to be available",
                        120.0)
        demo.create_tenants(portal, (TEAM,))
        demo.grant_quota(portal, TEAM)
        demo.create_cluster(portal, TEAM)
        tokens: dict[str, str] = {}

        def joined() -> list[dict[str, Any]] | None:
            boot_tokens(host, tokens)
            machines = phases(portal, "joined")
            return machines if machines and portal.cluster(TEAM)["ready"] else None

        machines = demo.wait_until(joined, "both machines to join and the cluster to be Ready",
                                   JOIN_TIMEOUT)
        nodes = {str(m["node_name"]) for m in machines}
        print(f"cluster {TEAM.label} is Ready on machines {sorted(MACHINES)}", flush=True)
        print("== checks", flush=True)
        report.check(f"{TEAM.label}: both machines serve it, whole",
                     {(m["tenant"], m["cluster"]) for m in machines} == {(TEAM.tenant,
                                                                          TEAM.cluster)}
                     and len(nodes) == len(MACHINES),
                     str([(m["name"], m["tenant"], m["cluster"], m["node_name"])
                          for m in machines]))
        kubeconfig = demo.issue_kubeconfig(portal, TEAM, folder)
        kubectl.apply(kubeconfig, demo.workload_manifests(TEAM))
        check_pods(report, kubectl, kubeconfig, nodes)
        check_nodes(report, host, kubectl, kubeconfig,
                    folder / f"{other.tenant}-{other.cluster}.kubeconfig", other, nodes)
        check_tokens(report, env, kubectl, kubeconfig, tokens)
        check_attacks(report, host, kubectl, kubeconfig,
                      folder / f"{other.tenant}-{other.cluster}.kubeconfig", other, nodes)
        if before_release is not None:
            before_release(nodes)
        print(f"== umbrella deletes {TEAM.label}", flush=True)
        portal.call("DELETE", f"/tenants/{TEAM.tenant}/clusters/{TEAM.cluster}")
        back = demo.wait_until(lambda: phases(portal, "available"),
                               "both machines back in the pool", RELEASE_TIMEOUT)
        images = [n for n in MACHINES
                  if ((host.get(METAL3_API, "BareMetalHost", n, MACHINES_NAMESPACE) or {})
                      .get("spec") or {}).get("image")]
        report.check(f"{TEAM.label}: deleted, its machines are back in the pool, deprovisioned",
                     all(m["cluster"] is None and m["node_name"] is None for m in back)
                     and not images,
                     f"{[(m['name'], m['phase'], m['cluster']) for m in back]}, "
                     f"imaged: {images}")
    except DemoError as error:
        report.check("the private-nodes walk ran to its end", False, str(error))
    finally:
        for name in MACHINES:
            portal.call("DELETE", f"/machines/{name}", accept=frozenset({404, 409}))
        host.close()
    return report


def register(portal: demo.Portal) -> None:
    host_cluster = portal.call("GET", "/host-clusters")["items"][0]["name"]
    for n, (name, mac) in enumerate(MACHINES.items(), start=3):
        portal.call("POST", "/machines", {
            "name": name, "host_cluster": host_cluster,
            "bmc_address": f"redfish+https://10.213.250.{20 + n}/redfish/v1/Systems/1",
            "bmc": {"username": "root", "password": "calvin-lab"}, "boot_mac": mac,
            "gpu_class": demo.H100, "gpu_count": 8, "rack": "rack-9"}, accept=frozenset({409}))
        print(f"machine {name} ({mac}, 8 x {demo.H100}) registered", flush=True)


def phases(portal: demo.Portal, phase: str) -> list[dict[str, Any]] | None:
    machines = [portal.call("GET", f"/machines/{name}") for name in MACHINES]
    return machines if all(m["phase"] == phase for m in machines) else None


def boot_tokens(host: KubernetesAdapter, seen: dict[str, str]) -> None:
    """The bootstrap tokens in the machines' user data on the host, while it is there."""
    for name in MACHINES:
        bare_metal_host = host.get(METAL3_API, "BareMetalHost", name, MACHINES_NAMESPACE) or {}
        reference = (bare_metal_host.get("spec") or {}).get("userData") or {}
        if not reference.get("name"):
            continue
        secret = host.get("v1", "Secret", reference["name"],
                          reference.get("namespace") or MACHINES_NAMESPACE)
        encoded = ((secret or {}).get("data") or {}).get("userData")
        if encoded:
            config = boot_config(base64.b64decode(encoded).decode())
            seen[name] = read_bootstrap_kubeconfig(config.kubeconfig).token


def check_pods(report: Report, kubectl: Kubectl, kubeconfig: Path, nodes: set[str]) -> None:
    count = len(TEAM.workload.pods)

    def running() -> list[dict[str, Any]] | None:
        pods = kubectl.pods(kubeconfig, "-n", "default", "-l", "team")
        found = [p for p in pods if p["status"].get("phase") == "Running"]
        return found if len(found) >= count else None

    pods = demo.wait_until(running, f"{count} of {TEAM.label}'s pods to run",
                           demo.RUNNING_TIMEOUT)
    on = {p["spec"].get("nodeName") for p in pods}
    report.check(f"{TEAM.label}: {count} pods Running through the team's own kubeconfig, on "
                 "its private nodes", len(pods) == count and on <= nodes,
                 f"{sorted(p['metadata']['name'] for p in pods)} on {sorted(map(str, on))}")
    events = json.loads(kubectl.run(kubeconfig, "get", "events", "-n", "default",
                                    "--field-selector", "reason=Scheduled", "-o", "json"))
    by = {e["involvedObject"]["name"]: e.get("reportingComponent")
          or (e.get("source") or {}).get("component") for e in events["items"]}
    schedulers = {by.get(p["metadata"]["name"]) for p in pods}
    report.check(f"{TEAM.label}: bound by its virtual cluster's own scheduler",
                 schedulers == {"default-scheduler"}, f"{sorted(map(str, schedulers))}")


def check_nodes(report: Report, host: KubernetesAdapter, kubectl: Kubectl, kubeconfig: Path,
                other_kubeconfig: Path, other: Team, nodes: set[str]) -> None:
    own = kubectl.names(kubeconfig, "nodes")
    report.check(f"{TEAM.label}: its private nodes are Nodes of its cluster", nodes <= own,
                 f"{sorted(nodes)} of {sorted(own)}")
    on_host = nodes & {n["metadata"]["name"] for n in host.list("v1", "Node")}
    report.check(f"{TEAM.label}: the host has none of its nodes", not on_host,
                 f"{sorted(on_host) or 'none'}")
    if other_kubeconfig.is_file():
        seen = nodes & kubectl.names(other_kubeconfig, "nodes")
        report.check(f"{other.label} sees none of {TEAM.label}'s nodes", not seen,
                     f"{sorted(seen) or 'none'}")
    pods = host.list("v1", "Pod", TEAM.namespace)
    workload = [p["metadata"]["name"] for p in pods
                if not any(o["kind"] == "StatefulSet"
                           for o in p["metadata"].get("ownerReferences") or [])]
    report.check(f"{TEAM.label}: the host runs its control plane and none of its pods",
                 bool(pods) and not workload,
                 f"{len(pods) - len(workload)} control-plane pod(s), others: {workload}")


def check_tokens(report: Report, env: Mapping[str, str], kubectl: Kubectl, kubeconfig: Path,
                 tokens: dict[str, str]) -> None:
    statuses = [host_status(env, token) for token in tokens.values()]
    report.check(f"{TEAM.label}: the host refuses the machines' bootstrap tokens",
                 len(statuses) == len(MACHINES) and set(statuses) == {401}, f"{statuses}")
    secrets = json.loads(kubectl.run(kubeconfig, "get", "secrets", "-n", "kube-system",
                                     "-o", "json"))["items"]
    ids = {token.split(".")[0] for token in tokens.values()}
    left = [s["metadata"]["name"] for s in secrets if s.get("type") == TOKEN_TYPE
            and s["metadata"]["name"].removeprefix("bootstrap-token-") in ids]
    report.check(f"{TEAM.label}: the bootstrap tokens are gone once the machines joined",
                 bool(ids) and not left, f"left: {left or 'none'}")


def host_status(env: Mapping[str, str], token: str) -> int:
    """The host API server's answer to GET /api/v1/nodes with the token alone."""
    cluster = _host_cluster(env["HOST_KUBECONFIG"])
    ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
    context = ssl.create_default_context(cadata=ca)
    with httpx.Client(base_url=cluster["server"], verify=context, trust_env=False,
                      timeout=30, headers={"Authorization": f"Bearer {token}"}) as client:
        return client.get("/api/v1/nodes").status_code


def _host_cluster(path: str) -> dict[str, Any]:
    cluster: dict[str, Any] = yaml.safe_load(Path(path).read_text())["clusters"][0]["cluster"]
    return cluster


def check_attacks(report: Report, host: KubernetesAdapter, kubectl: Kubectl, kubeconfig: Path,
                  other_kubeconfig: Path, other: Team, nodes: set[str]) -> None:
    """Issue 33's node battery against the private nodes: the other team, with the kubeconfig
    the portal issued it, reaches for each by every way a pod can (toleration, ``nodeName``,
    selector, affinity, spread, pod affinity, a DaemonSet). None may land there: the host has
    no such node, and the team's cluster runs only its own pods."""
    if not other_kubeconfig.is_file():
        report.check(f"{other.label} attacks {TEAM.label}'s nodes", False,
                     f"no kubeconfig of {other.label} in {other_kubeconfig.parent}")
        return
    tried = [attacks.node_attacks(node, TEAM.tenant) for node in sorted(nodes)]
    tags = [f"private{n}" for n in range(len(tried))]
    try:
        for tag, manifests in zip(tags, tried, strict=True):
            attacks.attempt(kubectl, other_kubeconfig, other.label, tag, manifests)
        time.sleep(ATTACK_SETTLE_SECONDS)  # the syncer and KAI act meanwhile: nothing may land
        landed = sorted(f"{p['metadata']['name']} on {p['spec']['nodeName']}"
                        for p in host.list("v1", "Pod", other.namespace)
                        if p["spec"].get("nodeName") in nodes)
        report.check(f"{other.label}'s pods reaching for {TEAM.label}'s nodes land on none "
                     "(host)", not landed, f"{landed or 'none'}")
        strangers = sorted(p["metadata"]["name"]
                           for p in kubectl.pods(kubeconfig, "-A")
                           if p["spec"].get("nodeName") in nodes
                           and "attack" in (p["metadata"].get("labels") or {}))
        report.check(f"{TEAM.label}'s nodes run none of {other.label}'s attacks (its cluster)",
                     not strangers, f"{strangers or 'none'}")
    finally:
        for tag, manifests in zip(tags, tried, strict=True):
            for each in manifests:
                kubectl.run(other_kubeconfig, "delete", each["kind"].lower(),
                            f"{each['metadata']['name']}-{tag}", "-n", "default",
                            "--ignore-not-found", "--wait=false")
