"""The fourth team of the walkthrough, on private nodes (issue 57): two spare machines of the
lab registered through the portal, a tenant's cluster with placement ``private-nodes`` taking
both, its GPU pods bound by the virtual cluster's own scheduler on those machines' Nodes, which
only that cluster sees; then the cluster deleted and the machines back in the pool.

It shares the three teams' lab (their acme/train is the other team that must not see the
nodes); its machines use boot MACs no other lab test uses (``52:54:00:a1:00:03``-``04``).
"""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.lab import demo, walk
from app.lab.kubelet_bootstrap import NodeCredentials, read_bootstrap_kubeconfig
from app.lab.machines import MACHINES_NAMESPACE, boot_config
from app.lab.main import Lab
from app.lab.metal3 import METAL3_API
from tests.lab import groups
from tests.support.waiting import wait_for

pytestmark = groups.TEAMS

MACHINES = {"lab-h100-03": "52:54:00:a1:00:03", "lab-h100-04": "52:54:00:a1:00:04"}
TEAM = walk.Team("umbrella", "Umbrella Robotics", "fleet", demo.H100, 16, "private-nodes",
                 walk.Workload(pods=("policy-0", "policy-1"), gpus_each=8))
OTHER = demo.TEAMS[0]  # acme/train, of the three teams' walk
BOOTSTRAP_TOKEN = "bootstrap.kubernetes.io/token"


@pytest.fixture(scope="module")
def portal(lab: Lab) -> demo.Portal:
    return demo.Portal(lab.portal_url, lab.admin_token)


@pytest.fixture(scope="module")
def kubectl(lab: Lab) -> walk.Kubectl:
    env = demo.read_env(lab.folder / "env")
    return walk.Kubectl(env["KUBECTL"], {"HTTPS_PROXY": env["HTTPS_PROXY"],
                                         "NO_PROXY": env["NO_PROXY"]})


def machine(portal: demo.Portal, name: str) -> dict[str, Any]:
    found: dict[str, Any] = portal.call("GET", f"/machines/{name}")
    return found


def all_in(portal: demo.Portal, phase: str) -> Callable[[], list[dict[str, Any]] | None]:
    def probe() -> list[dict[str, Any]] | None:
        machines = [machine(portal, name) for name in MACHINES]
        return machines if all(m["phase"] == phase for m in machines) else None
    return probe


def bare_metal_host(lab: Lab, name: str) -> dict[str, Any]:
    return lab.host.get(METAL3_API, "BareMetalHost", name, MACHINES_NAMESPACE) or {}


def boot_tokens(lab: Lab, seen: dict[str, str]) -> None:
    """The bootstrap tokens in the machines' user data on the host, while they are there."""
    for name in MACHINES:
        reference = (bare_metal_host(lab, name).get("spec") or {}).get("userData") or {}
        secret = lab.host.get("v1", "Secret", reference["name"],
                              reference.get("namespace") or MACHINES_NAMESPACE) \
            if reference.get("name") else None
        encoded = ((secret or {}).get("data") or {}).get("userData")
        if encoded:
            config = boot_config(base64.b64decode(encoded).decode())
            seen[name] = read_bootstrap_kubeconfig(config.kubeconfig).token


def host_answer(lab: Lab, *, token: str | None = None,
                credentials: NodeCredentials | None = None) -> int:
    """The host API server's status for GET /api/v1/nodes with these credentials only."""
    context = ssl.create_default_context(cadata=lab.server.ca.cert_pem.decode())
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with tempfile.TemporaryDirectory(prefix="node-creds-") as folder:
        if credentials is not None:
            cert, key = Path(folder) / "tls.crt", Path(folder) / "tls.key"
            cert.write_bytes(credentials.cert_pem)
            key.write_bytes(credentials.key_pem)
            context.load_cert_chain(cert, key)
        with httpx.Client(base_url=lab.server.url, verify=context, trust_env=False,
                          timeout=30, headers=headers) as client:
            return client.get("/api/v1/nodes").status_code


@pytest.fixture(scope="module")
def registered(lab: Lab, portal: demo.Portal) -> Iterator[list[dict[str, Any]]]:
    host_cluster = portal.call("GET", "/host-clusters")["items"][0]["name"]
    for n, (name, mac) in enumerate(MACHINES.items(), start=3):
        portal.call("POST", "/machines", {
            "name": name, "host_cluster": host_cluster,
            "bmc_address": f"redfish+https://10.214.250.{10 + n}/redfish/v1/Systems/1",
            "bmc": {"username": "root", "password": "calvin-lab"}, "boot_mac": mac,
            "gpu_class": demo.H100, "gpu_count": 8, "rack": "rack-9"})
    yield wait_for(all_in(portal, "available"), "Metal3 to register and inspect both machines",
                   timeout=120)
    for name in MACHINES:
        portal.call("DELETE", f"/machines/{name}", accept=frozenset({404, 409}))


def test_a_private_nodes_cluster_runs_its_gpu_pods_on_machines_only_it_sees_and_gives_them_back(
        lab: Lab, walked: walk.Report, portal: demo.Portal, kubectl: walk.Kubectl,
        registered: list[dict[str, Any]], tmp_path: Path) -> None:
    assert all(m["cluster"] is None and m["node_name"] is None for m in registered), registered
    demo.create_tenants(portal, (TEAM,))
    demo.grant_quota(portal, TEAM)
    demo.create_cluster(portal, TEAM)

    tokens: dict[str, str] = {}

    def joined_and_ready() -> list[dict[str, Any]] | None:
        boot_tokens(lab, tokens)
        machines = all_in(portal, "joined")()
        return machines if machines and portal.cluster(TEAM)["ready"] else None

    joined = wait_for(joined_and_ready, "both machines to join and the cluster to be Ready",
                      timeout=300)
    assert {m["cluster"] for m in joined} == {TEAM.cluster}, joined
    assert {m["tenant"] for m in joined} == {TEAM.tenant}, joined
    nodes = {str(m["node_name"]) for m in joined}
    assert len(nodes) == 2 and all(nodes), joined
    assert set(tokens) == set(MACHINES), "the machines' user data carried a bootstrap token"

    # The team's work, with the kubeconfig the portal issues, through the lab's proxy.
    kubeconfig = demo.issue_kubeconfig(portal, TEAM, tmp_path)
    kubectl.apply(kubeconfig, demo.workload_manifests(TEAM))
    running = wait_for(lambda: _running(kubectl, kubeconfig, len(TEAM.workload.pods)),
                       "the team's GPU pods to run", timeout=120)
    assert {p["spec"]["nodeName"] for p in running} <= nodes, running
    assert {p["spec"].get("schedulerName") for p in running} == {"default-scheduler"}
    events = json.loads(kubectl.run(kubeconfig, "get", "events", "-n", "default",
                                    "--field-selector", "reason=Scheduled", "-o", "json"))
    scheduled = {e["involvedObject"]["name"]: e.get("reportingComponent")
                 or (e.get("source") or {}).get("component") for e in events["items"]}
    assert {scheduled.get(p["metadata"]["name"]) for p in running} == {"default-scheduler"}, \
        scheduled

    # The nodes are the team's cluster's, and nobody else's.
    assert nodes <= kubectl.names(kubeconfig, "nodes")
    other = lab.folder / "kubeconfigs" / f"{OTHER.tenant}-{OTHER.cluster}.kubeconfig"
    assert not nodes & kubectl.names(other, "nodes")
    assert not nodes & {n["metadata"]["name"] for n in lab.host.list("v1", "Node")}
    host_pods = lab.host.list("v1", "Pod", TEAM.namespace)
    assert host_pods, "the control plane runs on the host"
    assert all(any(o["kind"] == "StatefulSet" for o in p["metadata"].get("ownerReferences")
                   or []) for p in host_pods), [p["metadata"]["name"] for p in host_pods]

    # The host refuses what the machines joined with.
    private = [p for p in list(lab.machine_boots.private.values()) if p.node_name in nodes]
    assert len(private) == 2
    for node in private:
        assert host_answer(lab, credentials=node.credentials) == 401, node.node_name
    for token in tokens.values():
        assert host_answer(lab, token=token) == 401
    secrets = json.loads(kubectl.run(kubeconfig, "get", "secrets", "-n", "kube-system",
                                     "-o", "json"))["items"]
    token_ids = {t.split(".")[0] for t in tokens.values()}
    left = [s["metadata"]["name"] for s in secrets if s.get("type") == BOOTSTRAP_TOKEN
            and s["metadata"]["name"].removeprefix("bootstrap-token-") in token_ids]
    assert not left, f"the bootstrap tokens outlive the join: {left}"

    # Deleted, the cluster gives its machines back to the pool, deprovisioned.
    portal.call("DELETE", f"/tenants/{TEAM.tenant}/clusters/{TEAM.cluster}")
    back = wait_for(all_in(portal, "available"), "both machines back in the pool", timeout=240)
    assert all(m["cluster"] is None and m["tenant"] is None and m["node_name"] is None
               for m in back), back
    assert all(not (bare_metal_host(lab, name).get("spec") or {}).get("image")
               for name in MACHINES)
    wait_for(lambda: not any(p.node_name in nodes
                             for p in list(lab.machine_boots.private.values())),
             "the machines' Nodes to leave", timeout=60)


def _running(kubectl: walk.Kubectl, kubeconfig: Path,
             count: int) -> list[dict[str, Any]] | None:
    pods = kubectl.pods(kubeconfig, "-n", "default", "-l", "team")
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    return running if len(running) >= count else None
