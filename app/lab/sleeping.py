"""Sleep, wake and clean-up on a running lab: a sleeping cluster's GPUs serve another tenant,
it comes back with everything it held, and one left asleep is deleted after a warning.

A machine of 4 GPUs is shared by initrode (guaranteed 3, a ConfigMap and a Deployment of 3 GPU
replicas in its cluster, a sleep policy of 5 idle minutes) and hooli (guaranteed 1, bursting,
3 pods: 1 runs, 2 wait). At the end of initrode's day its Deployment is scaled to zero; idle,
the cluster goes to sleep: its pods leave the host, its control plane stops, its guarantee goes
back to the pool, and KAI binds hooli's 2 waiting pods. ``portalctl kubeconfig --wait`` wakes
it: its ConfigMap and Deployment are there, and scaled up again its pods are bound (KAI takes
hooli's borrowed GPUs back for them). Put to sleep with "delete after 1 day asleep", it is
announced, then deleted with its namespace, its kubeconfigs revoked. The lab runs the sleep
policies 2880 times faster (``app.lab.main.SLEEP_POLICY_SPEEDUP``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app.kube.adapter import KubernetesAdapter
from app.lab import demo, host, walk
from app.lab.demo import Portal
from app.lab.reclaim import bound_pods, pool_node, small_gpu_container
from app.lab.walk import DemoError, Report, Team, Workload

B200 = "NVIDIA-B200"
MACHINE = "b200-s1-n1"
MACHINE_GPUS = 4
SLEEPER = Team("initrode", "Initrode", "nightly", B200, 3, "shared-pool",
               Workload(pods=(), gpus_each=1))
NEIGHBOUR = Team("hooli", "Hooli", "batch", B200, 1, "shared-pool",
                 Workload(pods=("batch-0", "batch-1", "batch-2"), gpus_each=1))
DEPLOYMENT = "nightly-train"
CONFIG = "nightly-settings"
SLEEP_TIMEOUT = 120.0
WAKE_TIMEOUT = 240.0
# A day asleep is 30 s in the lab; the worker then removes the cluster.
DELETE_TIMEOUT = 300.0


def sleeper_objects() -> list[dict[str, Any]]:
    labels = {"team": SLEEPER.tenant, "app": DEPLOYMENT}
    config = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": CONFIG, "namespace": "default"},
              "data": {"schedule": "nightly at 02:00 UTC"}}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": DEPLOYMENT, "namespace": "default"},
                  "spec": {"replicas": SLEEPER.gpus,
                           "selector": {"matchLabels": {"app": DEPLOYMENT}},
                           "template": {"metadata": {"labels": labels},
                                        "spec": {"containers": [small_gpu_container()]}}}}
    return [config, deployment]


def run(env: Mapping[str, str], folder: Path) -> Report:
    portal, admin, kubectl = demo.clients(env)
    folder.mkdir(parents=True, exist_ok=True)
    report = Report()
    try:
        print("== a machine of 4 GPUs, two tenants: initrode 3 guaranteed, hooli 1", flush=True)
        set_up(portal, admin)
        configs = {team: demo.issue_kubeconfig(portal, team, folder)
                   for team in (SLEEPER, NEIGHBOUR)}
        kubectl.apply(configs[SLEEPER], sleeper_objects())
        _wait_bound(admin, SLEEPER, SLEEPER.gpus)
        kubectl.apply(configs[NEIGHBOUR], demo.workload_manifests(NEIGHBOUR))
        _wait_bound(admin, NEIGHBOUR, NEIGHBOUR.gpus)
        sleep_on_idle(report, portal, admin, kubectl, configs[SLEEPER])
        path = wake_on_kubeconfig(report, env, admin, kubectl, folder)
        if path is not None:
            delete_after_days_asleep(report, portal, admin)
    except DemoError as error:
        report.check("the sleep walk ran to its end", False, str(error))
    finally:
        admin.close()
    return report


def set_up(portal: Portal, admin: KubernetesAdapter) -> None:
    node = pool_node()
    node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = MACHINE
    node["metadata"]["labels"]["nvidia.com/gpu.product"] = B200
    node["metadata"]["labels"]["nvidia.com/gpu.count"] = str(MACHINE_GPUS)
    for part in ("capacity", "allocatable"):
        node["status"][part]["nvidia.com/gpu"] = str(MACHINE_GPUS)
    host.add_fleet(admin, [node])
    demo.wait_until(lambda: demo.has_ready_gpus(portal, B200),
                    f"the portal to see Ready {B200} GPUs", 90.0)
    teams = (SLEEPER, NEIGHBOUR)
    demo.create_tenants(portal, teams)
    portal.call("PUT", f"/tenants/{NEIGHBOUR.tenant}/burst-policy", {"tier": "burst"})
    for team in teams:
        demo.grant_quota(portal, team)
        demo.create_cluster(portal, team)
    for team in teams:
        demo.wait_ready(portal, team)


def sleep_on_idle(report: Report, portal: Portal, admin: KubernetesAdapter,
                  kubectl: walk.Kubectl, kubeconfig: Path) -> None:
    print(f"== {SLEEPER.label} sleeps after 5 idle minutes; its day ends", flush=True)
    # Set once the worker has seen its pods bound: the policy never finds it idle before.
    demo.wait_until(lambda: _in_use(portal) == SLEEPER.gpus,
                    f"the portal to see {SLEEPER.label}'s GPUs in use", 90.0)
    _policy(portal, {"sleep_after_idle_minutes": 5})
    started = time.monotonic()
    kubectl.run(kubeconfig, "scale", f"deployment/{DEPLOYMENT}", "--replicas=0")
    asleep = demo.wait_until(lambda: _asleep(portal), f"{SLEEPER.label} to sleep",
                             SLEEP_TIMEOUT)
    took = time.monotonic() - started
    # The StatefulSet's pod is <release>-0 (the synced pods' names end with -x-<release>).
    control_plane = [p for p in demo.host_pods(admin, SLEEPER.namespace)
                     if p["metadata"]["name"] == f"{SLEEPER.cluster}-0"
                     and not p["metadata"].get("deletionTimestamp")]
    report.check(f"{SLEEPER.label}: asleep on idle, its control plane stopped",
                 not control_plane and asleep["phase"] == "Sleeping"
                 and asleep["power"]["reason"] == "idle",
                 f"asleep since {asleep['power']['asleep_since']}, {took:.1f} s after its "
                 f"pods went ({asleep['power']['reason']})")
    _policy(portal, {})
    lent = demo.wait_until(lambda: demo.at_least(bound_pods(admin, NEIGHBOUR), 3),
                           f"{NEIGHBOUR.label}'s waiting pods to be bound", SLEEP_TIMEOUT)
    report.check(f"{NEIGHBOUR.label}: the sleeping cluster's GPUs are bound to its pods",
                 len(lent) == len(NEIGHBOUR.workload.pods),
                 f"{len(lent)} of {NEIGHBOUR.label}'s pods bound on {MACHINE}")


def wake_on_kubeconfig(report: Report, env: Mapping[str, str], admin: KubernetesAdapter,
                       kubectl: walk.Kubectl, folder: Path) -> Path | None:
    print(f"== portalctl kubeconfig {SLEEPER.cluster} --wait wakes it", flush=True)
    path = folder / f"{SLEEPER.tenant}-{SLEEPER.cluster}-woken.kubeconfig"
    started = time.monotonic()
    done = _portalctl(env, folder, "kubeconfig", SLEEPER.cluster, "--tenant", SLEEPER.tenant,
                      "--role", "admin", "--wait", "--file", str(path))
    took = time.monotonic() - started
    report.check(f"{SLEEPER.label}: portalctl kubeconfig woke it and waited",
                 done.returncode == 0 and path.is_file(),
                 f"exit {done.returncode} after {took:.1f} s: {done.stderr.strip()[-200:]}")
    if done.returncode != 0:
        return None
    kept = kubectl.names(path, "configmaps") | kubectl.names(path, "deployments")
    report.check(f"{SLEEPER.label}: its ConfigMap and Deployment are still there",
                 {CONFIG, DEPLOYMENT} <= kept, f"{sorted(kept)}")
    kubectl.run(path, "scale", f"deployment/{DEPLOYMENT}", f"--replicas={SLEEPER.gpus}")
    again = demo.wait_until(lambda: demo.at_least(bound_pods(admin, SLEEPER), SLEEPER.gpus),
                            f"{SLEEPER.label}'s pods to be bound again", WAKE_TIMEOUT)
    report.check(f"{SLEEPER.label}: its pods run again, its guarantee reclaimed for them",
                 len(again) == SLEEPER.gpus
                 and len(bound_pods(admin, NEIGHBOUR)) == NEIGHBOUR.gpus,
                 f"{len(again)} bound; {NEIGHBOUR.label} back to "
                 f"{len(bound_pods(admin, NEIGHBOUR))}")
    return path


def delete_after_days_asleep(report: Report, portal: Portal,
                             admin: KubernetesAdapter) -> None:
    print(f"== {SLEEPER.label}: deleted after a day asleep (30 s here), announced 15 s "
          "before", flush=True)
    _policy(portal, {"delete_after_sleep_days": 1})
    portal.call("POST", f"/tenants/{SLEEPER.tenant}/clusters/{SLEEPER.cluster}/sleep")
    warned = demo.wait_until(lambda: _warned(portal), f"{SLEEPER.label}'s deletion to be "
                             "announced", DELETE_TIMEOUT)
    still_there = portal.cluster(SLEEPER)["phase"] == "Sleeping"
    report.check(f"{SLEEPER.label}: its deletion is announced before it happens",
                 warned["deletes_at"] is not None and still_there,
                 f"warned at {warned['deletion_warned_at']}, deleted at {warned['deletes_at']}")
    demo.wait_until(lambda: _gone(portal), f"{SLEEPER.label} to be deleted", DELETE_TIMEOUT)
    namespace = admin.get("v1", "Namespace", SLEEPER.namespace)
    revoked = portal.call("GET", "/audit", query={"action": "kubeconfig.revoke",
                                                 "tenant": SLEEPER.tenant})["items"]
    report.check(f"{SLEEPER.label}: deleted with its namespace, its kubeconfigs revoked",
                 (namespace is None or bool(namespace["metadata"].get("deletionTimestamp")))
                 and len(revoked) >= 2,
                 f"namespace {'gone' if namespace is None else 'terminating'}; "
                 f"{len(revoked)} kubeconfigs revoked")


def _policy(portal: Portal, policy: dict[str, Any]) -> None:
    portal.call("PUT", f"/tenants/{SLEEPER.tenant}/clusters/{SLEEPER.cluster}/sleep-policy",
                policy)


def _in_use(portal: Portal) -> float | None:
    in_use = portal.cluster(SLEEPER).get("gpus_in_use") or {}
    return in_use.get("guaranteed")


def _warned(portal: Portal) -> dict[str, Any] | None:
    policy: dict[str, Any] = portal.cluster(SLEEPER)["sleep_policy"]
    return policy if policy.get("deletion_warned_at") else None


def _gone(portal: Portal) -> bool:
    return portal.call("GET", f"/tenants/{SLEEPER.tenant}/clusters/{SLEEPER.cluster}",
                       accept=frozenset({404})) is None


def _portalctl(env: Mapping[str, str], folder: Path,
               *args: str) -> subprocess.CompletedProcess[str]:
    """portalctl as a tenant would run it, logged in with the lab's token."""
    portalctl = str(Path(sys.executable).parent / "portalctl")
    environment = {**os.environ, "XDG_CONFIG_HOME": str(folder / "portalctl"),
                   "NO_PROXY": env["NO_PROXY"], "HTTPS_PROXY": env["HTTPS_PROXY"]}
    subprocess.run([portalctl, "login", "--url", env["PORTAL_URL"], "--token-stdin"],
                   input=env["PORTAL_TOKEN"], env=environment, capture_output=True, text=True,
                   check=True, timeout=60)
    return subprocess.run([portalctl, *args], env=environment, capture_output=True, text=True,
                          check=False, timeout=WAKE_TIMEOUT + 60)


def _asleep(portal: Portal) -> dict[str, Any] | None:
    cluster: dict[str, Any] = portal.cluster(SLEEPER)
    return cluster if cluster["power"]["asleep_since"] else None


def _wait_bound(admin: KubernetesAdapter, team: Team, count: int) -> None:
    demo.wait_until(lambda: demo.at_least(bound_pods(admin, team), count),
                    f"{count} of {team.label}'s pods to be bound", demo.RUNNING_TIMEOUT)

