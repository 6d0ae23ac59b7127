"""The three teams on a running lab: NVIDIA's walkthrough, through the portal, checked from
outside it.

Three tenants get approved GPU quota through the portal's API; each creates a shared-pool
cluster, one also a dedicated-nodes cluster on GB200 nodes the admin dedicates to it. With the
kubeconfigs the portal issues, each team applies GPU pods and a Job into its own virtual
cluster with kubectl. Then the checks read the host (the lab's admin kubeconfig), the teams'
own kubeconfigs and the portal's API, and say what they found. Last, the lab's mailbox: each
team's admin got its notification emails, and none of another team's (``mail.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from app.kube.adapter import KubernetesAdapter
from app.kube.manifests.names import cluster_queue_name
from app.lab import isolation, mail
from app.lab.gpu import SCHEDULER_NAME
from app.lab.walk import DemoError, Kubectl, Report, Team, Workload

T = TypeVar("T")
GPU = "nvidia.com/gpu"
QUEUE_LABEL = "kai.scheduler/queue"
PODGROUP_ANNOTATION = "pod-group-name"
H100, L40S, GB200 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S", "NVIDIA-GB200"
DEDICATED_NODES = ("gb200-c1-n1", "gb200-c1-n2")
READY_TIMEOUT = 240.0
RUNNING_TIMEOUT = 120.0


TEAMS = (
    Team("acme", "Acme Research", "train", H100, 3, "shared-pool",
         Workload(pods=("trainer-0", "trainer-1", "trainer-2"), gpus_each=1, jobs=("eval",))),
    Team("globex", "Globex Inference", "serve", L40S, 2, "shared-pool",
         Workload(pods=("server-0", "server-1"), gpus_each=1)),
    Team("initech", "Initech Labs", "burst", H100, 2, "shared-pool",
         Workload(pods=("notebook-0",), gpus_each=1)),
    Team("initech", "Initech Labs", "pretrain", GB200, 8, "dedicated-nodes",
         Workload(pods=("llm-0", "llm-1"), gpus_each=4)),
)


def read_env(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return dict(pairs)


def wait_until(probe: Callable[[], T | None], what: str, timeout: float) -> T:
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(1.0)


# ----- the portal, as a client sees it


@dataclass
class Portal:
    url: str
    token: str

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.url, trust_env=False, timeout=30,
                                   headers={"Authorization": f"Bearer {self.token}"})

    def call(self, method: str, path: str, body: Mapping[str, Any] | None = None,
             accept: frozenset[int] = frozenset(),
             query: Mapping[str, str] | None = None) -> Any:
        answer = self.client.request(method, f"/api/v1{path}", json=body, params=query)
        if answer.status_code in accept:
            return None
        if answer.is_error:
            raise DemoError(f"{method} {path}: {answer.status_code} {answer.text[:300]}")
        return answer.json() if "json" in answer.headers.get("content-type", "") else answer.text

    def class_id(self, product: str) -> int:
        classes = self.call("GET", "/gpu-classes")["items"]
        return next(int(c["id"]) for c in classes if c["product"] == product)

    def cluster(self, team: Team) -> dict[str, Any]:
        found: dict[str, Any] = self.call("GET", f"/tenants/{team.tenant}/clusters/{team.cluster}")
        return found

    def in_use(self, tenant: str, product: str) -> float | None:
        """The quota's "in use" of the class: None until the worker has read a host."""
        quota = self.call("GET", f"/tenants/{tenant}/quota")
        figures = [row["in_use_gpus"] for row in quota["items"] if row["gpu_class"] == product]
        return float(figures[0]) if figures and figures[0] is not None else None


# ----- the setup, as an admin and the teams would do it


def set_up(portal: Portal, teams: tuple[Team, ...]) -> None:
    create_tenants(portal, teams)
    for team in teams:
        grant_quota(portal, team)
    for node in DEDICATED_NODES:
        portal.call("PUT", f"/nodes/{node}/assignment", {"tenant": "initech"},
                    accept=frozenset({409}))
    print(f"nodes {', '.join(DEDICATED_NODES)} dedicated to initech", flush=True)
    for team in teams:
        create_cluster(portal, team)


def create_tenants(portal: Portal, teams: tuple[Team, ...]) -> None:
    """Each tenant with its admin, who hears of what happens to it by email."""
    for tenant, display_name in {t.tenant: t.display_name for t in teams}.items():
        portal.call("POST", "/tenants", {"slug": tenant, "display_name": display_name},
                    accept=frozenset({409}))
        admin = mail.team_admin(tenant)
        portal.call("POST", f"/tenants/{tenant}/members", {"email": admin, "role": "admin"},
                    accept=frozenset({409}))
        print(f"tenant {tenant}, admin {admin}", flush=True)


def grant_quota(portal: Portal, team: Team) -> None:
    request = portal.call("POST", f"/tenants/{team.tenant}/quota-requests", {
        "gpu_class_id": portal.class_id(team.product), "gpus": team.gpus,
        "cpu_millicores": 16000, "memory_mib": 65536, "reason": f"{team.cluster} (lab demo)"})
    portal.call("POST", f"/quota-requests/{request['id']}/approve", {})
    print(f"quota {team.tenant}: +{team.gpus} x {team.product} approved", flush=True)


def create_cluster(portal: Portal, team: Team) -> None:
    portal.call("POST", f"/tenants/{team.tenant}/clusters", {
        "name": team.cluster, "gpu_class_id": portal.class_id(team.product),
        "gpus": team.gpus, "placement": team.placement}, accept=frozenset({409}))
    print(f"cluster {team.label}: {team.gpus} x {team.product}, {team.placement}", flush=True)


def wait_ready(portal: Portal, team: Team) -> None:
    def ready() -> bool:
        cluster = portal.cluster(team)
        return bool(cluster["ready"])
    wait_until(ready, f"cluster {team.label} to be Ready", READY_TIMEOUT)
    print(f"cluster {team.label} is Ready", flush=True)


def issue_kubeconfig(portal: Portal, team: Team, folder: Path) -> Path:
    text = portal.call("POST", f"/tenants/{team.tenant}/clusters/{team.cluster}/kubeconfigs",
                       {"role": "admin", "lifetime_seconds": 8 * 3600})
    path = folder / f"{team.tenant}-{team.cluster}.kubeconfig"
    path.write_text(text)
    path.chmod(0o600)
    return path


# ----- the workloads, as kubectl applies them


def gpu_container(gpus: int) -> dict[str, Any]:
    """A CUDA container as a restricted namespace admits it (kwok runs nothing)."""
    return {"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
            "command": ["nvidia-smi", "-L"],
            "resources": {"limits": {GPU: str(gpus)}, "requests": {"cpu": "100m",
                                                                   "memory": "128Mi"}},
            "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                                "runAsUser": 1000, "capabilities": {"drop": ["ALL"]},
                                "seccompProfile": {"type": "RuntimeDefault"}}}


def workload_manifests(team: Team) -> list[dict[str, Any]]:
    work = team.workload
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": name, "namespace": "default", "labels": {"team": team.tenant}},
             "spec": {"containers": [gpu_container(work.gpus_each)]}}
            for name in work.pods]
    jobs = [{"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": name, "namespace": "default"},
             "spec": {"backoffLimit": 0, "template": {
                 "metadata": {"labels": {"team": team.tenant}},
                 "spec": {"restartPolicy": "Never",
                          "containers": [gpu_container(work.gpus_each)]}}}}
            for name in work.jobs]
    return pods + jobs


# ----- the checks, from outside the portal


def host_pods(host: KubernetesAdapter, namespace: str) -> list[dict[str, Any]]:
    return host.list("v1", "Pod", namespace)


def gpus_of(pod: Mapping[str, Any]) -> int:
    return sum(int(c.get("resources", {}).get("limits", {}).get(GPU, 0))
               for c in pod["spec"]["containers"])


def team_host_pods(host: KubernetesAdapter, team: Team) -> list[dict[str, Any]]:
    """The team's workload on the host: synced pods labelled with the team (CoreDNS is not)."""
    return [p for p in host_pods(host, team.namespace)
            if (p["metadata"].get("labels") or {}).get("team") == team.tenant]


def check_team(report: Report, team: Team, host: KubernetesAdapter, kubectl: Kubectl,
               kubeconfig: Path, node_products: Mapping[str, str]) -> None:
    running = wait_until(lambda: _running_in_virtual(kubectl, kubeconfig, team.fits),
                         f"{team.fits} of {team.label}'s pods to run", RUNNING_TIMEOUT)
    report.check(f"{team.label}: {team.fits} pods Running through the team's own kubeconfig",
                 len(running) == team.fits, f"{sorted(running)}")
    synced = team_host_pods(host, team)
    bound = [p for p in synced if p["spec"].get("nodeName")]
    report.check(f"{team.label}: pods synced to host namespace {team.namespace} and bound",
                 len(bound) == team.fits, f"{len(synced)} synced, {len(bound)} bound")
    products = {node_products.get(p["spec"]["nodeName"], "?") for p in bound}
    report.check(f"{team.label}: bound to {team.product} nodes only", products <= {team.product},
                 f"{sorted(products)}")
    if team.placement == "shared-pool":
        _check_shared_pool(report, team, bound)
    else:
        _check_dedicated(report, team, bound)
    used = sum(gpus_of(p) for p in bound)
    report.check(f"{team.label}: GPUs bound within the grant", used <= team.gpus,
                 f"{used} bound of {team.gpus} granted")


def _running_in_virtual(kubectl: Kubectl, kubeconfig: Path, count: int) -> set[str]:
    pods = kubectl.pods(kubeconfig, "-n", "default", "-l", "team")
    running = {p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"}
    return running if len(running) >= count else set()


def _check_shared_pool(report: Report, team: Team, bound: list[dict[str, Any]]) -> None:
    queue = cluster_queue_name(team.tenant, team.cluster)
    queues = {(p["metadata"].get("labels") or {}).get(QUEUE_LABEL) for p in bound}
    schedulers = {p["spec"].get("schedulerName") for p in bound}
    report.check(f"{team.label}: in leaf queue {queue} (the portal's webhook)",
                 queues == {queue}, f"{sorted(map(str, queues))}")
    report.check(f"{team.label}: bound by KAI", schedulers == {SCHEDULER_NAME},
                 f"{sorted(map(str, schedulers))}")
    grouped = [p for p in bound
               if (p["metadata"].get("annotations") or {}).get(PODGROUP_ANNOTATION)]
    report.check(f"{team.label}: grouped by KAI's podgrouper", len(grouped) == len(bound),
                 f"{len(grouped)} of {len(bound)} have a pod group")


def _check_dedicated(report: Report, team: Team, bound: list[dict[str, Any]]) -> None:
    nodes = {p["spec"]["nodeName"] for p in bound}
    report.check(f"{team.label}: on its dedicated nodes only", nodes <= set(DEDICATED_NODES),
                 f"{sorted(nodes)}")
    schedulers = {p["spec"].get("schedulerName", "default-scheduler") for p in bound}
    report.check(f"{team.label}: scheduled by its own virtual scheduler, not KAI",
                 SCHEDULER_NAME not in schedulers, f"{sorted(schedulers)}")


def check_over_quota(report: Report, team: Team, portal: Portal, kubectl: Kubectl,
                     kubeconfig: Path) -> None:
    beyond = team.workload.count - team.fits
    if beyond <= 0:
        return
    pods = kubectl.pods(kubeconfig, "-n", "default", "-l", "team")
    pending = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Pending"]
    report.check(f"{team.label}: the {beyond} pod(s) beyond the grant stay Pending",
                 len(pending) == beyond, f"{sorted(pending)}")
    # The worker looks each resync: until it has seen the pods that run, more wait.
    waiting = settled(lambda: portal.cluster(team).get("waiting_for_gpus") or {},
                      lambda found: found.get("pods") == beyond, 150.0)
    report.check(f"{team.label}: the portal says how many pods wait for GPUs, and why",
                 waiting.get("pods") == beyond and bool(waiting.get("reason")),
                 f"{waiting.get('pods')} waiting: {waiting.get('reason')}")


def has_ready_gpus(portal: Portal, product: str) -> bool:
    """Whether the portal's inventory shows Ready GPUs of the class (the worker syncs nodes each
    resync): quota is approved against Ready GPUs, and a node joins before kwok makes it Ready."""
    return any(c["product"] == product and (c.get("capacity") or {}).get("ready", 0) > 0
               for c in portal.call("GET", "/gpu-classes")["items"])


def at_least(pods: list[dict[str, Any]], count: int) -> list[dict[str, Any]] | None:
    """``pods`` once there are ``count`` of them (for ``wait_until``)."""
    return pods if len(pods) >= count else None


def settled(read: Callable[[], T], done: Callable[[T], bool], timeout: float) -> T:
    """What ``read`` gives once ``done`` says so, or what it gave last."""
    deadline = time.monotonic() + timeout
    found = read()
    while not done(found) and time.monotonic() < deadline:
        time.sleep(2.0)
        found = read()
    return found


def check_in_use(report: Report, portal: Portal, host: KubernetesAdapter,
                 teams: tuple[Team, ...]) -> None:
    for tenant, product in sorted({(t.tenant, t.product) for t in teams
                                   if t.placement == "shared-pool"}):
        _check_in_use(report, portal, host, [t for t in teams if t.tenant == tenant
                                             and t.product == product])


def _check_in_use(report: Report, portal: Portal, host: KubernetesAdapter,
                  teams: list[Team]) -> None:
    tenant, product = teams[0].tenant, teams[0].product
    bound = sum(gpus_of(p) for t in teams for p in team_host_pods(host, t)
                if p["spec"].get("nodeName") and p["status"].get("phase") == "Running")
    shown = settled(lambda: portal.in_use(tenant, product), lambda figure: figure == bound,
                    150.0)
    report.check(f"{tenant}: in use ({product}) is what KAI bound", shown == bound,
                 f"portal says {shown}, host has {bound} bound")


def check_gpu_hours(report: Report, portal: Portal, team: Team) -> None:
    """The GPU-hours in use follow what was bound: never more than the GPUs held (a minute of
    the cluster's GPUs of slack, the sampling's grain), and the CSV says the same. Today's
    figure grows while the pods run, so the CSV is read just before and just after the API:
    the API's figure lies between the two."""
    before, (used, held), after = settled(lambda: _gpu_hours(portal, team),
                                          lambda hours: hours[1][0] > 0, 60.0)
    report.check(f"{team.tenant}: GPU-hours in use ({team.product}) follow what was bound",
                 0 < used <= held + team.gpus / 60 and before - 1e-4 <= used <= after + 1e-4,
                 f"{used:.4f} in use of {held:.4f} held; CSV {before:.4f} to {after:.4f}")


def _gpu_hours(portal: Portal, team: Team) -> tuple[float, tuple[float, float], float]:
    """Today's GPU-hours of the team's class: in use by the CSV, in use and held by the API,
    in use by the CSV again."""
    today = {"tenant": team.tenant}
    before = _csv_gpu_hours(portal, team)
    rows = [r for r in portal.call("GET", "/usage", query=today)["rows"]
            if r["gpu_class"] == team.product]
    api = (sum(r["used_gpu_hours"] for r in rows),
           sum(r["shared_pool_gpu_hours"] + r["dedicated_gpu_hours"] for r in rows))
    return before, api, _csv_gpu_hours(portal, team)


def _csv_gpu_hours(portal: Portal, team: Team) -> float:
    csv_rows = [line.split(",") for line in portal.call(
        "GET", "/usage.csv", query={"tenant": team.tenant}).splitlines()[1:]
        if team.product in line]
    return sum(float(row[8]) for row in csv_rows)


def node_products(host: KubernetesAdapter) -> dict[str, str]:
    return {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(
        "nvidia.com/gpu.product", "") for n in host.list("v1", "Node")}


# ----- the whole walk


def clients(env: Mapping[str, str]) -> tuple[Portal, KubernetesAdapter, Kubectl]:
    """The portal with the admin's token, the host as its admin, kubectl through the lab's
    proxy: what a walk reads and drives (the caller closes the host's client)."""
    return (Portal(env["PORTAL_URL"], env["PORTAL_TOKEN"]),
            KubernetesAdapter.from_kubeconfig(env["HOST_KUBECONFIG"]),
            Kubectl(env["KUBECTL"], {"HTTPS_PROXY": env["HTTPS_PROXY"],
                                     "NO_PROXY": env["NO_PROXY"]}))


def run(env: Mapping[str, str], folder: Path, teams: tuple[Team, ...] = TEAMS) -> Report:
    portal, host, kubectl = clients(env)
    folder.mkdir(parents=True, exist_ok=True)
    report = Report()
    try:
        print("== the admin grants quota, dedicates nodes; the teams create clusters", flush=True)
        set_up(portal, teams)
        for team in teams:
            wait_ready(portal, team)
        kubeconfigs = {team: issue_kubeconfig(portal, team, folder) for team in teams}
        print(f"== each team applies its GPU work with its own kubeconfig ({folder})",
              flush=True)
        for team in teams:
            kubectl.apply(kubeconfigs[team], workload_manifests(team))
        print("== checks", flush=True)
        products = node_products(host)
        for team in teams:
            check_team(report, team, host, kubectl, kubeconfigs[team], products)
        for team in teams:
            check_over_quota(report, team, portal, kubectl, kubeconfigs[team])
        isolation.check_dedicated_nodes_alone(report, host, teams[-1], DEDICATED_NODES)
        for seen_by, other in _pairs(teams):
            isolation.check_isolation(report, kubectl, seen_by, kubeconfigs[seen_by], other,
                                      products)
        isolation.check_shared_pools_list_no_dedicated_node(report, host, kubectl, kubeconfigs)
        isolation.check_system_pods(report, kubectl, kubeconfigs)
        check_in_use(report, portal, host, teams)
        for team in teams[:2]:
            check_gpu_hours(report, portal, team)
        if env.get("MAILDIR"):
            print("== the teams' notification emails", flush=True)
            mail.check(report, Path(env["MAILDIR"]), teams)
    except DemoError as error:
        report.check("the walkthrough ran to its end", False, str(error))
    finally:
        host.close()
    return report


def _pairs(teams: tuple[Team, ...]) -> Iterator[tuple[Team, Team]]:
    for seen_by in teams:
        for other in teams:
            if other.tenant != seen_by.tenant and seen_by.placement == "shared-pool" \
                    and other.placement == "shared-pool":
                yield seen_by, other
