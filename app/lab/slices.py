"""Less than a GPU on a running lab: MIG slices and shares of one GPU, with KAI's own programs
deciding and the lab playing what the machines would report.

Fabrikam is granted 3 x 1g.10gb of an A100 in MIG mode (mixed strategy) and runs a Deployment
of 4 notebooks of one slice each: KAI binds three on the MIG machine, the host's quota keeps the
fourth out (it waits in the virtual cluster, with the reason on the portal). Tailspin is granted
0.5 of an H100 and runs two pods of 0.25: KAI's binder puts both on one GPU (one GPU group, one
reservation pod whose device the lab's player reports), a pod asking 0.75 is refused in words
and a third 0.25 waits with KAI's limit. The ledger's slice-hours and fractional GPU-hours follow
what was bound. The checks read the host, the teams' kubeconfigs and the portal's API, as in
``app.lab.reclaim``.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.kube.adapter import KubernetesAdapter
from app.kube.errors import KubeError
from app.kube.manifests import labels as lbl
from app.kube.manifests.names import cluster_queue_name
from app.kube.manifests.units import mig_resource
from app.lab import demo, host
from app.lab.demo import Portal
from app.lab.gpu import A100_80GB, SCHEDULER_NAME, mig_node
from app.lab.main import WORKER_RESYNC_SECONDS
from app.lab.reclaim import Integral
from app.lab.reservations import GPU_GROUP, GPU_INDEX, RESERVATION_APP, RESERVATION_NAMESPACE
from app.lab.walk import DemoError, Kubectl, Report, Team, Workload

H100 = demo.H100
MIG_NODE = "a100-mig-lab"
PROFILE = "1g.10gb"
SLICE = mig_resource(PROFILE)
SLICES = 3
SHARE, QUARTER = "0.5", "0.25"
SHARE_STEP = 25
NOTEBOOKS = Team("fabrikam", "Fabrikam", "notebooks", A100_80GB, SLICES, "shared-pool",
                 Workload(pods=(), gpus_each=1))
INFERENCE = Team("tailspin", "Tailspin Toys", "inference", H100, 0, "shared-pool",
                 Workload(pods=(), gpus_each=1))
NOTEBOOK = "notebook"
QUOTA_NAME = "tenant-quota"
# The reason of vCluster's syncer's event on a virtual pod the host refused.
SYNC_ERROR = "SyncError"
# A share is bound after its reservation pod reports (KAI waits 40 s, then retries the bind).
BOUND_TIMEOUT = 180.0


def set_up(portal: Portal, admin: KubernetesAdapter) -> None:
    """An A100 machine in MIG mode joins; the H100 class is shared in quarters; both tenants
    are granted less than a GPU and make a cluster of it."""
    node = mig_node(MIG_NODE, {PROFILE: 7})
    node["metadata"]["labels"].update({"topology.kubernetes.io/region": "eu-central",
                                       "topology.kubernetes.io/zone": "eu-central-a"})
    before = _ready_slices(portal)
    host.add_fleet(admin, [node])
    print(f"machine {MIG_NODE}: 7 x {PROFILE} of an A100 80GB (MIG, mixed) joins", flush=True)
    # The worker reads the host's nodes each resync; its slices join the class's.
    demo.wait_until(lambda: _ready_slices(portal) >= before + 7,
                    f"the portal to see {MIG_NODE}'s {PROFILE} slices Ready", 90.0)
    portal.call("PATCH", f"/gpu-classes/{portal.class_id(H100)}", {"share_step": SHARE_STEP})
    print(f"class {H100}: shared in steps of 0.{SHARE_STEP}", flush=True)
    demo.create_tenants(portal, (NOTEBOOKS, INFERENCE))
    grant(portal, NOTEBOOKS, {"slices": SLICES, "mig_profile": PROFILE})
    grant(portal, INFERENCE, {"gpu_share": SHARE})
    create_cluster(portal, NOTEBOOKS, {"slices": SLICES, "mig_profile": PROFILE})
    create_cluster(portal, INFERENCE, {"gpu_share": SHARE})


def _ready_slices(portal: Portal) -> int:
    """Ready 1g.10gb slices of the A100 80GB class, as the portal's inventory counts them."""
    classes = portal.call("GET", "/gpu-classes")["items"]
    return sum(int(p.get("ready") or 0) for c in classes if c["product"] == A100_80GB
               for p in (c.get("capacity") or {}).get("mig_profiles") or []
               if p.get("profile") == PROFILE)


def grant(portal: Portal, team: Team, amount: Mapping[str, Any]) -> None:
    request = portal.call("POST", f"/tenants/{team.tenant}/quota-requests", {
        "gpu_class_id": portal.class_id(team.product), **amount, "cpu_millicores": 16000,
        "memory_mib": 65536, "reason": f"{team.cluster} (lab slices walk)"})
    portal.call("POST", f"/quota-requests/{request['id']}/approve", {})
    print(f"quota {team.tenant}: {request.get('grant') or amount} approved", flush=True)


def create_cluster(portal: Portal, team: Team, amount: Mapping[str, Any]) -> None:
    portal.call("POST", f"/tenants/{team.tenant}/clusters", {
        "name": team.cluster, "gpu_class_id": portal.class_id(team.product),
        "placement": team.placement, **amount}, accept=frozenset({409}))
    print(f"cluster {team.label}: {dict(amount)} of {team.product}", flush=True)


def run(env: Mapping[str, str], folder: Path) -> Report:
    portal, admin, kubectl = demo.clients(env)
    folder.mkdir(parents=True, exist_ok=True)
    report = Report()
    try:
        print("== less than a GPU: MIG slices and shares of one GPU", flush=True)
        check_whole_gpus_refused(report, portal)
        set_up(portal, admin)
        for team in (NOTEBOOKS, INFERENCE):
            demo.wait_ready(portal, team)
        kubeconfigs = {team: demo.issue_kubeconfig(portal, team, folder)
                       for team in (NOTEBOOKS, INFERENCE)}
        check_host_objects(report, admin)
        with watching(admin) as watch:
            slices_walk(report, portal, admin, kubectl, kubeconfigs[NOTEBOOKS])
            shares_walk(report, admin, kubectl, kubeconfigs[INFERENCE])
            check_kept_through_resyncs(report, admin)
            check_ledger(report, portal, watch)
    except DemoError as error:
        report.check("the slices walk ran to its end", False, str(error))
    finally:
        admin.close()
    return report


# ----- quota and host objects


def check_whole_gpus_refused(report: Report, portal: Portal) -> None:
    """Whole GPUs of a class the fleet has only as MIG slices: refused, pointing to them."""
    demo.create_tenants(portal, (NOTEBOOKS,))
    answer = portal.client.post(f"/api/v1/tenants/{NOTEBOOKS.tenant}/quota-requests", json={
        "gpu_class_id": portal.class_id(A100_80GB), "gpus": 1, "cpu_millicores": 1000,
        "memory_mib": 1024, "reason": "whole GPUs of a MIG-only class"})
    said = answer.text
    report.check(f"{NOTEBOOKS.tenant}: whole GPUs of a MIG-only class are refused, pointing to "
                 "its slices",
                 answer.status_code == 422 and "only MIG slices" in said and PROFILE in said,
                 f"{answer.status_code}: {said[:240]}")


def check_host_objects(report: Report, admin: KubernetesAdapter) -> None:
    """The namespace quota and KAI leaf queue of each cluster, in the unit KAI and the quota
    count: a slice of 1g.10gb is 1 GPU in KAI's queue, a share its fraction."""
    quota = _hard(admin, NOTEBOOKS)
    leaf = _leaf_gpu(admin, NOTEBOOKS)
    report.check(f"{NOTEBOOKS.label}: the host quota caps {SLICES} x {PROFILE}, KAI's queue "
                 f"counts {SLICES} GPUs",
                 quota.get(f"requests.{SLICE}") == str(SLICES)
                 and quota.get(f"requests.{lbl.GPU_RESOURCE}") == "0"
                 and _number(leaf.get("quota")) == SLICES,
                 f"quota {quota}; leaf gpu {leaf}")
    quota, leaf = _hard(admin, INFERENCE), _leaf_gpu(admin, INFERENCE)
    report.check(f"{INFERENCE.label}: no whole GPU in the host quota, KAI's queue holds {SHARE}",
                 quota.get(f"requests.{lbl.GPU_RESOURCE}") == "0"
                 and _number(leaf.get("quota")) == _number(leaf.get("limit")) == float(SHARE),
                 f"quota {quota}; leaf gpu {leaf}")


def _hard(admin: KubernetesAdapter, team: Team) -> dict[str, str]:
    found = admin.get("v1", "ResourceQuota", QUOTA_NAME, team.namespace) or {}
    return dict((found.get("spec") or {}).get("hard") or {})


def _leaf_gpu(admin: KubernetesAdapter, team: Team) -> dict[str, Any]:
    queue = admin.get(lbl.KAI_API_VERSION, "Queue",
                      cluster_queue_name(team.tenant, team.cluster)) or {}
    return dict(((queue.get("spec") or {}).get("resources") or {}).get("gpu") or {})


def _number(value: Any) -> float | None:
    with contextlib.suppress(TypeError, ValueError):
        return float(value)
    return None


# ----- the workloads


def container(limits: Mapping[str, str]) -> dict[str, Any]:
    built = demo.gpu_container(1)
    built["resources"]["limits"] = dict(limits)
    return built


def notebooks(replicas: int) -> dict[str, Any]:
    """Fabrikam's notebooks, one slice each."""
    labels = {"team": NOTEBOOKS.tenant, "app": NOTEBOOK}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": NOTEBOOK, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": NOTEBOOK}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [container({SLICE: "1"})]}}}}


def share_pod(name: str, fraction: str, **extra_limits: str) -> dict[str, Any]:
    """A Tailspin pod asking for ``fraction`` of one GPU, as KAI reads it (an annotation)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"team": INFERENCE.tenant},
                         "annotations": {lbl.GPU_FRACTION: fraction}},
            "spec": {"containers": [container(extra_limits)]}}


def bound(admin: KubernetesAdapter, team: Team) -> list[dict[str, Any]]:
    return [p for p in demo.team_host_pods(admin, team)
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]


def slices_walk(report: Report, portal: Portal, admin: KubernetesAdapter, kubectl: Kubectl,
                kubeconfig: Path) -> None:
    print(f"== {NOTEBOOKS.tenant} runs 4 notebooks of one {PROFILE} slice on its {SLICES}",
          flush=True)
    kubectl.apply(kubeconfig, [notebooks(SLICES + 1)])
    pods = demo.wait_until(lambda: demo.at_least(bound(admin, NOTEBOOKS), SLICES),
                           f"{SLICES} of {NOTEBOOKS.label}'s notebooks to be bound",
                           BOUND_TIMEOUT)
    strategies = {_node_label(admin, p["spec"]["nodeName"], "nvidia.com/mig.strategy")
                  for p in pods}
    report.check(f"{NOTEBOOKS.label}: {SLICES} notebooks bound by KAI on MIG slices",
                 len(pods) == SLICES and strategies == {"mixed"}
                 and {p["spec"].get("schedulerName") for p in pods} == {SCHEDULER_NAME},
                 f"{len(pods)} bound on {sorted({p['spec']['nodeName'] for p in pods})}")
    pending = demo.wait_until(lambda: _pending(kubectl, kubeconfig, NOTEBOOK, 1),
                              f"the 4th of {NOTEBOOKS.label}'s notebooks to wait", 60.0)
    # The worker looks each resync: until it has seen the pods that run, more wait.
    waiting = demo.wait_until(lambda: _waiting(portal, NOTEBOOKS, 1),
                              f"the portal to say 1 of {NOTEBOOKS.label}'s pods waits", 150.0)
    reason = str(waiting.get("reason") or "")
    report.check(f"{NOTEBOOKS.label}: the 4th notebook waits, and the portal says why",
                 len(pending) == 1 and waiting.get("pods") == 1 and "exceeded quota" in reason
                 and SLICE in reason, f"{pending} Pending; {waiting.get('pods')} waiting: {reason}")
    other = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "big-notebook", "namespace": "default"},
             "spec": {"containers": [container({"nvidia.com/mig-3g.40gb": "1"})]}}
    kubectl.apply(kubeconfig, [other])
    said = demo.wait_until(lambda: _sync_error(kubectl, kubeconfig, "big-notebook"),
                           "the refusal of a 3g.40gb pod", 90.0)
    report.check(f"{NOTEBOOKS.label}: a pod asking for another profile is refused in words",
                 f"{SLICE} only" in said, said[:240])


def shares_walk(report: Report, admin: KubernetesAdapter, kubectl: Kubectl,
                kubeconfig: Path) -> None:
    print(f"== {INFERENCE.tenant} runs two pods of {QUARTER} on its {SHARE} of an H100",
          flush=True)
    # One after the other: KAI v0.12.0's binder, binding two shares of a new GPU group at once,
    # may delete the group's reservation pod (kai-scheduler/KAI-Scheduler#1103).
    _bind_share(admin, kubectl, kubeconfig, 0)
    pods = _bind_share(admin, kubectl, kubeconfig, 1)
    groups = {(p["metadata"].get("labels") or {}).get(GPU_GROUP) for p in pods}
    nodes = {p["spec"]["nodeName"] for p in pods}
    reservations = [r for r in admin.list("v1", "Pod", RESERVATION_NAMESPACE,
                                          label_selector=RESERVATION_APP)
                    if (r["metadata"].get("labels") or {}).get(GPU_GROUP) in groups]
    devices = {(r["metadata"].get("annotations") or {}).get(GPU_INDEX) for r in reservations}
    report.check(f"{INFERENCE.label}: two {QUARTER} pods bound by KAI's binder on one GPU",
                 len(pods) == 2 and len(nodes) == 1 and len(groups) == 1 and None not in groups
                 and len(reservations) == 1 and None not in devices,
                 f"nodes {sorted(nodes)}, GPU groups {sorted(map(str, groups))}, reservation "
                 f"pods {[r['metadata']['name'] for r in reservations]} reporting {devices}")
    portions = [_portion(admin, p) for p in pods]
    received = {(p["metadata"].get("annotations") or {}).get("received-resource-type")
                for p in pods}
    report.check(f"{INFERENCE.label}: each pod got a fraction of that GPU from the binder",
                 received == {"Fraction"} and portions == [(d, QUARTER) for d in devices] * 2,
                 f"received {received}; device and portion {portions}")

    kubectl.apply(kubeconfig, [share_pod("infer-big", "0.75")])
    said = demo.wait_until(lambda: _sync_error(kubectl, kubeconfig, "infer-big"),
                           "the refusal of a 0.75 pod", 90.0)
    report.check(f"{INFERENCE.label}: a pod asking 0.75 waits, refused in words",
                 "asks 0.75 of" in said and f"holds {SHARE}" in said, said[:240])
    kubectl.apply(kubeconfig, [share_pod("infer-2", QUARTER)])
    reason = demo.wait_until(lambda: _kai_reason(admin, INFERENCE, "infer-2"),
                             "KAI's reason on the third quarter", 90.0)
    report.check(f"{INFERENCE.label}: a third {QUARTER} waits on the host with KAI's limit",
                 f"Limit is {SHARE} GPUs" in reason and len(bound(admin, INFERENCE)) == 2,
                 reason[:240])


def _bind_share(admin: KubernetesAdapter, kubectl: Kubectl, kubeconfig: Path,
                index: int) -> list[dict[str, Any]]:
    """Pod ``infer-<index>`` of a quarter applied, once KAI has bound it: the bound pods."""
    kubectl.apply(kubeconfig, [share_pod(f"infer-{index}", QUARTER)])
    return demo.wait_until(lambda: demo.at_least(bound(admin, INFERENCE), index + 1),
                           f"{INFERENCE.label}'s share infer-{index} to be bound", BOUND_TIMEOUT)


def _waiting(portal: Portal, team: Team, pods: int) -> dict[str, Any] | None:
    found: dict[str, Any] = portal.cluster(team).get("waiting_for_gpus") or {}
    return found if found.get("pods") == pods else None


def _node_label(admin: KubernetesAdapter, node: str, key: str) -> str | None:
    found = admin.get("v1", "Node", node) or {}
    labels: dict[str, str] = (found.get("metadata") or {}).get("labels") or {}
    return labels.get(key)


def _portion(admin: KubernetesAdapter, pod: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The device and portion KAI's binder wrote for the pod (its sharing ConfigMap)."""
    prefix = (pod["metadata"].get("annotations") or {}).get(lbl.SHARED_GPU_CONFIGMAP)
    found = admin.get("v1", "ConfigMap", f"{prefix}-0", pod["metadata"]["namespace"]) or {}
    data = found.get("data") or {}
    return data.get("NVIDIA_VISIBLE_DEVICES"), data.get("GPU_PORTION")


def _pending(kubectl: Kubectl, kubeconfig: Path, app: str, count: int) -> list[str] | None:
    """The virtual cluster's Pending pods of ``app`` once there are ``count`` (those bound on
    the host turn Running there as the syncer copies their status back)."""
    pods = kubectl.pods(kubeconfig, "-n", "default", "-l", f"app={app}")
    pending = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Pending"]
    return pending if len(pending) == count else None


def _sync_error(kubectl: Kubectl, kubeconfig: Path, pod: str) -> str | None:
    """What vCluster's syncer says on the virtual pod the host refused (its latest
    ``SyncError`` event, which the portal's waiting pods read too)."""
    events = json.loads(kubectl.run(
        kubeconfig, "get", "events", "-n", "default", "-o", "json", "--field-selector",
        f"involvedObject.name={pod},reason={SYNC_ERROR}"))["items"]
    latest = sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime")
                                               or ""))
    return str(latest[-1].get("message") or "") or None if latest else None


def _kai_reason(admin: KubernetesAdapter, team: Team, name: str) -> str | None:
    for pod in demo.team_host_pods(admin, team):
        if pod["metadata"]["name"].startswith(f"{name}-x-"):
            for condition in (pod.get("status") or {}).get("conditions") or []:
                if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                    return str(condition.get("message") or "") or None
    return None


def check_kept_through_resyncs(report: Report, admin: KubernetesAdapter) -> None:
    """Two resyncs of the portal's worker and the syncer's updates later, the shares keep the
    binder's GPU group label and their reservation pod lives: nothing the portal or the syncer
    writes takes them off the GPU they share (risk R3 of the design)."""
    before = {r["metadata"]["name"] for r in admin.list(
        "v1", "Pod", RESERVATION_NAMESPACE, label_selector=RESERVATION_APP)}
    time.sleep(2 * WORKER_RESYNC_SECONDS + 5)
    pods = bound(admin, INFERENCE)
    groups = {(p["metadata"].get("labels") or {}).get(GPU_GROUP) for p in pods}
    after = {r["metadata"]["name"] for r in admin.list(
        "v1", "Pod", RESERVATION_NAMESPACE, label_selector=RESERVATION_APP)}
    report.check(f"{INFERENCE.label}: after two resyncs the shares keep their GPU group and "
                 "reservation",
                 len(pods) == 2 and len(groups) == 1 and None not in groups
                 and bool(before) and before <= after,
                 f"{len(pods)} bound, groups {sorted(map(str, groups))}; reservations "
                 f"{sorted(before)} then {sorted(after)}")


# ----- the ledger


@dataclass
class Held:
    """The slices Fabrikam's notebooks and the GPUs Tailspin's shares held on the host, read
    every quarter second."""

    admin: KubernetesAdapter
    slices: Integral = field(default_factory=Integral)
    shared: Integral = field(default_factory=Integral)
    stopping: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stopping.is_set():
            with contextlib.suppress(KubeError):
                notebooks_bound = len(bound(self.admin, NOTEBOOKS))
                shares_bound = len(bound(self.admin, INFERENCE))
                now = time.monotonic()
                self.slices.read(notebooks_bound, now)
                self.shared.read(shares_bound * float(QUARTER), now)
            time.sleep(0.25)


@contextlib.contextmanager
def watching(admin: KubernetesAdapter) -> Iterator[Held]:
    held = Held(admin)
    thread = threading.Thread(target=held.run, name="slices-watch", daemon=True)
    thread.start()
    try:
        yield held
    finally:
        held.stopping.set()
        thread.join(5)


def check_ledger(report: Report, portal: Portal, held: Held) -> None:
    """Today's slice-hours of the notebooks and GPU-hours of the shares (the per-cluster
    report) follow what the host held, within the samples' lag (each change up to two resyncs
    late); the CSV's last columns say the units."""
    late = 2 * WORKER_RESYNC_SECONDS + 5
    rows = {r["cluster"]: r for tenant in (NOTEBOOKS.tenant, INFERENCE.tenant)
            for r in portal.call("GET", "/usage/clusters", query={"tenant": tenant})["rows"]}
    notebook, shares = rows.get(NOTEBOOKS.cluster) or {}, rows.get(INFERENCE.cluster) or {}
    slice_seconds = float(notebook.get("used_slice_hours") or 0) * 3600
    report.check(f"{NOTEBOOKS.label}: the ledger's slice-hours follow the slices bound",
                 notebook.get("unit") == "mig" and notebook.get("mig_profile") == PROFILE
                 and slice_seconds > 0
                 and abs(slice_seconds - held.slices.seconds) <= late * held.slices.variation,
                 f"ledger {slice_seconds / 60:.2f} slice-minutes; the host held "
                 f"{held.slices.seconds / 60:.2f}")
    gpu_seconds = float(shares.get("used_gpu_hours") or 0) * 3600
    report.check(f"{INFERENCE.label}: the ledger's GPU-hours are the fractions bound",
                 shares.get("unit") in ("share", "shared") and gpu_seconds > 0
                 and abs(gpu_seconds - held.shared.seconds) <= late * held.shared.variation,
                 f"ledger {gpu_seconds / 60:.2f} GPU-minutes; the host held "
                 f"{held.shared.seconds / 60:.2f}")
    units = {}
    for tenant in (NOTEBOOKS.tenant, INFERENCE.tenant):
        text = portal.call("GET", "/usage/clusters.csv", query={"tenant": tenant})
        for row in csv.DictReader(io.StringIO(text)):
            units[row["cluster"]] = (row.get("unit"), row.get("mig_profile"))
    report.check("the CSV's last columns say the units",
                 units.get(NOTEBOOKS.cluster) == ("mig", PROFILE)
                 and (units.get(INFERENCE.cluster) or ("",))[0] in ("share", "shared"),
                 f"{units}")
