"""The three teams on the lab, for real: vCluster syncers started by the lab's pod runner for
the StatefulSets the worker's helm installs, KAI binding the synced GPU pods on kwok's fleet,
the portal issuing the kubeconfigs the teams' kubectl uses. Then faults on that stack.

The lab needs root (network namespaces) and ``make tools``; it uses a network of its own
(``plt<slot>``, 10.(214+slot)/16, a slot per running lab) so that a developer's ``make lab``, or
another suite, may run beside it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from typing import Any

from app.kube.adapter import KubernetesAdapter
from app.lab import demo, walk
from app.lab.main import Lab
from tests.lab import groups
from tests.support.waiting import wait_for

pytestmark = groups.TEAMS

ACME = demo.TEAMS[0]


def test_three_teams_run_gpu_pods_in_their_own_clusters_within_their_quota(
        walked: walk.Report) -> None:
    failures = "\n".join(f"{c.name}: {c.detail}" for c in walked.failures())
    assert walked.passed, f"the walkthrough failed:\n{failures}"
    names = [c.name for c in walked.checks]
    # Every claim of the walkthrough was checked, not skipped on the way.
    for claim in ("Running through the team's own kubeconfig", "bound by KAI",
                  "on its dedicated nodes only", "sees none of", "in use",
                  "wait for GPUs, and why",
                  # the lab's SMTP server: each team's admin told of its own tenant only
                  "got its quota approved and its clusters Ready by email",
                  "got nothing of another team's"):
        assert any(claim in name for name in names), claim


def kubectl(lab: Lab, team: walk.Team, *args: str, stdin: str | None = None) -> str:
    env = demo.read_env(lab.folder / "env")
    tool = walk.Kubectl(env["KUBECTL"], {"HTTPS_PROXY": env["HTTPS_PROXY"],
                                         "NO_PROXY": env["NO_PROXY"]})
    return tool.run(lab.folder / "kubeconfigs" / f"{team.tenant}-{team.cluster}.kubeconfig",
                    *args, stdin=stdin)


def condition(lab: Lab, team: walk.Team, type_: str) -> dict[str, Any]:
    env = demo.read_env(lab.folder / "env")
    cluster = demo.Portal(env["PORTAL_URL"], env["PORTAL_TOKEN"]).cluster(team)
    return next((c for c in cluster["conditions"] if c["type"] == type_), {})


def test_a_crashed_control_plane_shows_in_the_conditions_and_comes_back_with_its_pods(
        lab: Lab, walked: walk.Report) -> None:
    before = set(kubectl(lab, ACME, "get", "pods", "-o", "name").split())
    lab.runner.crash(ACME.namespace, hold=True)
    down = wait_for(lambda: _not_true(condition(lab, ACME, "Ready")),
                    "the portal to see acme/train's control plane down", timeout=90.0)
    lab.runner.release(ACME.namespace)
    wait_for(lambda: condition(lab, ACME, "Ready").get("status") == "True",
             "acme/train to be Ready again", timeout=120.0)
    after = set(kubectl(lab, ACME, "get", "pods", "-o", "name").split())
    assert down["message"], down
    assert after == before  # its data store kept everything the team created


def _not_true(found: dict[str, Any]) -> dict[str, Any] | None:
    return found if found and found.get("status") != "True" else None


def test_pods_created_while_kais_scheduler_is_down_are_bound_once_it_is_back(
        lab: Lab, walked: walk.Report) -> None:
    host = lab.server.adapter()
    lab.gpus.kill("scheduler")
    try:
        # GPUs freed, and the pod that waited for one gone: vCluster retries a pod the host's
        # quota refused with a growing delay (minutes, late in the walk), so a pod created now
        # is the one synced at once; it waits for KAI.
        kubectl(lab, ACME, "delete", "job", "eval", "--wait=true")
        kubectl(lab, ACME, "delete", "pod", "trainer-0", "--wait=true")
        kubectl(lab, ACME, "apply", "-f", "-", stdin=json.dumps(_late_pod()))
        waiting = wait_for(lambda: _unbound(host, ACME), "a synced acme pod waiting for KAI",
                           timeout=90.0)
    finally:
        lab.gpus.start_program("scheduler")
    name = waiting["metadata"]["name"]
    bound = wait_for(lambda: _bound(host, ACME.namespace, name), f"{name} to be bound",
                     timeout=90.0)
    used = sum(demo.gpus_of(p) for p in demo.team_host_pods(host, ACME)
               if p["spec"].get("nodeName"))
    assert bound["spec"]["nodeName"].startswith("h100-")
    assert used <= ACME.gpus
    host.close()


def _late_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "late-0", "namespace": "default", "labels": {"team": "acme"}},
            "spec": {"containers": [demo.gpu_container(1)]}}


def _unbound(host: KubernetesAdapter, team: walk.Team) -> dict[str, Any] | None:
    return next((p for p in demo.team_host_pods(host, team)
                 if not p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")),
                None)


def _bound(host: KubernetesAdapter, namespace: str, name: str) -> dict[str, Any] | None:
    pod = host.get("v1", "Pod", name, namespace)
    return pod if pod and pod["spec"].get("nodeName") else None


def test_a_killed_portal_worker_resumes_and_nothing_is_lost(lab: Lab,
                                                             walked: walk.Report) -> None:
    env = demo.read_env(lab.folder / "env")
    portal = demo.Portal(env["PORTAL_URL"], env["PORTAL_TOKEN"])
    team = walk.Team("globex", "Globex Inference", "batch", demo.L40S, 1, "shared-pool",
                     walk.Workload(pods=("batch-0",), gpus_each=1))
    portal.call("POST", "/quota-requests/" + str(portal.call(
        "POST", "/tenants/globex/quota-requests",
        {"gpu_class_id": portal.class_id(demo.L40S), "gpus": 1, "reason": "batch"})["id"])
        + "/approve", {})
    portal.call("POST", "/tenants/globex/clusters", {
        "name": "batch", "gpu_class_id": portal.class_id(demo.L40S), "gpus": 1})
    lab.processes["portal"].send_signal(signal.SIGKILL)
    lab.processes["portal"].wait()
    lab.restart("portal")
    demo.wait_ready(portal, team)
    clusters = {c["name"] for c in portal.call("GET", "/tenants/globex/clusters")["items"]}
    assert clusters == {"serve", "batch"}
    path = demo.issue_kubeconfig(portal, team, lab.folder / "kubeconfigs")
    nodes = subprocess.run([env["KUBECTL"], f"--kubeconfig={path}", "get", "nodes", "-o", "name"],
                           capture_output=True, text=True, check=True,
                           env={**os.environ, "HTTPS_PROXY": env["HTTPS_PROXY"],
                                "NO_PROXY": env["NO_PROXY"]}).stdout.split()
    assert nodes and all(n.startswith("node/l40s-") for n in nodes)
