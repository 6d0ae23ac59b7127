"""The fourth team of the walkthrough, on private nodes (issue 57), as ``make lab-demo`` walks
it (``app/lab/private_demo.py``): two spare machines of the lab registered through the portal,
a tenant's cluster with placement ``private-nodes`` taking both, its GPU pods bound by the
virtual cluster's own scheduler on those machines' Nodes, which only that cluster sees; then
the cluster deleted and the machines back in the pool. Here also what only the lab's process
holds: the certificates the machines' kubelets were issued, which the host must refuse.

It shares the three teams' lab (their acme/train is the other team that must not see the
nodes); its machines use boot MACs no other lab test uses (``52:54:00:a1:00:03``-``04``).
"""

from __future__ import annotations

import ssl
import tempfile
from pathlib import Path

import httpx

from app.lab import demo, private_demo, walk
from app.lab.kubelet_bootstrap import NodeCredentials
from app.lab.main import Lab
from tests.lab import groups
from tests.support.waiting import wait_for

pytestmark = groups.TEAMS


def host_answer(lab: Lab, credentials: NodeCredentials) -> int:
    """The host API server's status for GET /api/v1/nodes with the kubelet's certificate."""
    context = ssl.create_default_context(cadata=lab.server.ca.cert_pem.decode())
    with tempfile.TemporaryDirectory(prefix="node-credentials-") as folder:
        cert, key = Path(folder) / "tls.crt", Path(folder) / "tls.key"
        cert.write_bytes(credentials.cert_pem)
        key.write_bytes(credentials.key_pem)
        context.load_cert_chain(cert, key)
    with httpx.Client(base_url=lab.server.url, verify=context, trust_env=False,
                      timeout=30) as client:
        return client.get("/api/v1/nodes").status_code


def test_a_private_nodes_cluster_runs_its_gpu_pods_on_machines_only_it_sees_and_gives_them_back(
        lab: Lab, walked: walk.Report) -> None:
    refused: dict[str, int] = {}

    def certificates(nodes: set[str]) -> None:
        # The kubelets' certificates, signed by the virtual cluster's CA, work there...
        private = [p for p in list(lab.machine_boots.private.values()) if p.node_name in nodes]
        for node in private:
            refused[node.node_name] = host_answer(lab, node.credentials)

    report = private_demo.run(demo.read_env(lab.folder / "env"), lab.folder / "kubeconfigs",
                              before_release=certificates)
    failures = "\n".join(f"{c.name}: {c.detail}" for c in report.failures())
    assert report.passed, f"the private-nodes walk failed:\n{failures}"
    names = [c.name for c in report.checks]
    for claim in ("both machines serve it", "on its private nodes",
                  "bound by its virtual cluster's own scheduler", "are Nodes of its cluster",
                  "the host has none of its nodes", "acme/train sees none of",
                  "the host runs its control plane and none of its pods",
                  "the host refuses the machines' bootstrap tokens",
                  "the bootstrap tokens are gone", "land on none (host)",
                  "run none of acme/train's attacks", "its machines are back in the pool"):
        assert any(claim in name for name in names), claim
    # ...and the host refuses them.
    assert len(refused) == len(private_demo.MACHINES) and set(refused.values()) == {401}, refused

    def nodes_gone() -> bool:
        return not any(p.node_name in refused for p in list(lab.machine_boots.private.values()))

    wait_for(nodes_gone, "the lab's kubelets to leave with their machines", timeout=60)
