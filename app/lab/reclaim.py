"""Guaranteed and burst GPUs on a running lab, with KAI's own programs deciding.

A pool of one class (one machine of 8 GPUs) is shared by two tenants: Northwind, guaranteed 2
and allowed to borrow 6 more, runs 8 pods while Contoso (guaranteed 4) runs nothing; then
Contoso submits 4 pods. KAI reclaims Northwind's borrowed GPUs for them (its pods are deleted,
kwok lets them go, its Deployment makes new ones that wait) and binds Contoso's; Northwind
keeps its guarantee throughout. The checks read the host, the teams' kubeconfigs and the
portal's API, as in ``app.lab.demo``.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from app.kube.adapter import KubernetesAdapter
from app.lab import demo, host, walk
from app.lab.demo import Portal
from app.lab.gpu import KWOK_NODE
from app.lab.main import WORKER_RESYNC_SECONDS
from app.lab.walk import DemoError, Report, Team, Workload
from app.usage.sampling import sample_hold

H200 = "NVIDIA-H200"
POOL_NODE = "h200-r1-n1"
POOL_GPUS = 8
BURST_GPUS = 6
BORROWER = Team("northwind", "Northwind Research", "sweep", H200, 2, "shared-pool",
                Workload(pods=(), gpus_each=1))
OWNER = Team("contoso", "Contoso AI", "train", H200, 4, "shared-pool",
             Workload(pods=tuple(f"train-{i}" for i in range(4)), gpus_each=1))
# Northwind's second cluster, guaranteed 1 more GPU once the pool is full.
EVAL = Team("northwind", "Northwind Research", "eval", H200, 1, "shared-pool",
            Workload(pods=("eval-0",), gpus_each=1))
SWEEP = "sweep"
RECLAIM_TIMEOUT = 180.0


def pool_node() -> dict[str, Any]:
    """A GPU machine as its kubelet and GPU Feature Discovery describe it: 8 GPUs of a class
    no other tenant of the lab uses, so that the two tenants fill it between them."""
    labels = {"kubernetes.io/hostname": POOL_NODE, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", "topology.kubernetes.io/region": "eu-central",
              "topology.kubernetes.io/zone": "eu-central-a", "nvidia.com/gpu.present": "true",
              "nvidia.com/gpu.product": H200, "nvidia.com/gpu.count": str(POOL_GPUS),
              "nvidia.com/gpu.memory": "143771", "nvidia.com/mig.capable": "false"}
    capacity = {"cpu": "112", "memory": "2063104Mi", "pods": "110",
                "ephemeral-storage": "3500Gi", "nvidia.com/gpu": str(POOL_GPUS)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": POOL_NODE, "labels": labels, "annotations": dict(KWOK_NODE)},
            "spec": {"taints": []}, "status": {"capacity": capacity, "allocatable": capacity}}


def sweep_deployment(replicas: int) -> dict[str, Any]:
    """Northwind's hyperparameter sweep: more replicas than its guarantee, on purpose."""
    labels = {"team": BORROWER.tenant, "app": SWEEP}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": SWEEP, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": SWEEP}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [small_gpu_container()]}}}}


def small_gpu_container() -> dict[str, Any]:
    """One GPU and little memory: the cluster's memory quota holds all the replicas (the
    namespace's default limit, 2Gi each, would not)."""
    container = demo.gpu_container(1)
    container["resources"]["limits"]["memory"] = "256Mi"
    return container


def bound_pods(admin: KubernetesAdapter, team: Team) -> list[dict[str, Any]]:
    """The team's pods on the host that hold GPUs: bound and not being deleted."""
    return [p for p in demo.team_host_pods(admin, team)
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]


@dataclass
class Integral:
    """A figure read now and then, held between readings: its area over time (value-seconds)
    and how much it moved in all (the sum of its changes)."""

    value: float = 0.0
    read_at: float | None = None
    seconds: float = 0.0
    variation: float = 0.0

    def read(self, value: float, now: float) -> None:
        if self.read_at is not None:
            self.seconds += self.value * (now - self.read_at)
        self.variation += abs(value - self.value)
        self.value, self.read_at = value, now


@dataclass(frozen=True)
class Sample:
    """One reading of the host by the portal's worker, as the cluster's page shows it."""

    taken_s: float
    used: float
    burst: float


@dataclass
class Watch:
    """Northwind's pods on the host, read every quarter second from before its burst: the
    GPU-seconds they held (all, and beyond the guarantee; a pod being deleted holds its GPU
    until it is gone), and from ``mark()`` on the fewest bound, the pods that went and how soon
    the first went. Alongside, each sample of the sweep's GPUs in use the portal's worker
    took (the cluster's ``gpus_in_use``, read as often)."""

    admin: KubernetesAdapter
    portal: Portal
    stopping: threading.Event = field(default_factory=threading.Event)
    held: Integral = field(default_factory=Integral)
    burst: Integral = field(default_factory=Integral)
    samples: list[Sample] = field(default_factory=list)
    marked_at: float | None = None
    fewest: int = POOL_GPUS
    seen: set[str] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)
    first_gone_after: float | None = None

    def mark(self) -> None:
        self.marked_at = time.monotonic()

    def run(self) -> None:
        while not self.stopping.is_set():
            pods = [p for p in demo.team_host_pods(self.admin, BORROWER)
                    if p["spec"].get("nodeName")]
            now = time.monotonic()
            self.held.read(len(pods), now)
            self.burst.read(max(0, len(pods) - BORROWER.gpus), now)
            names = {p["metadata"]["name"] for p in pods
                     if not p["metadata"].get("deletionTimestamp")}
            if self.marked_at is not None:
                self._after_mark(names, now - self.marked_at)
            self.seen |= names
            self._read_sample()
            time.sleep(0.25)

    def _read_sample(self) -> None:
        """A failed read is skipped: the worker's samples are kept by the portal, and the next
        read sees the latest one (a sample replaced within one read is not seen)."""
        with contextlib.suppress(DemoError, httpx.HTTPError):
            in_use = self.portal.cluster(BORROWER).get("gpus_in_use")
            if not in_use:
                return
            observed = datetime.fromisoformat(in_use["observed_at"])
            taken = (observed if observed.tzinfo else observed.replace(tzinfo=UTC)).timestamp()
            if not self.samples or self.samples[-1].taken_s != taken:
                self.samples.append(Sample(taken, in_use["guaranteed"] + in_use["burst"],
                                           in_use["burst"]))

    def _after_mark(self, names: set[str], since_mark: float) -> None:
        self.fewest = min(self.fewest, len(names))
        if self.seen - names and self.first_gone_after is None:
            self.first_gone_after = since_mark
        self.gone |= self.seen - names


def owed_by_samples(samples: list[Sample], hold_s: float, now_s: float) -> tuple[float, float]:
    """The GPU-seconds in use and burst the ledger owes ``samples``: each stands until the
    next, at most ``hold_s``, the last until ``now_s``."""
    ends = [later.taken_s for later in samples[1:]] + [now_s]
    spans = [(max(0.0, min(end, sample.taken_s + hold_s) - sample.taken_s), sample)
             for sample, end in zip(samples, ends, strict=True)]
    return (sum(length * sample.used for length, sample in spans),
            sum(length * sample.burst for length, sample in spans))


def longest_interval(samples: list[Sample]) -> float:
    return max((b.taken_s - a.taken_s for a, b in itertools.pairwise(samples)), default=0.0)


@contextlib.contextmanager
def watching(admin: KubernetesAdapter, portal: Portal) -> Iterator[Watch]:
    # A client of its own: the scenario's calls go on beside the watch's.
    watch = Watch(admin, Portal(portal.url, portal.token))
    thread = threading.Thread(target=watch.run, name="reclaim-watch", daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        watch.stopping.set()
        thread.join(5)


def evictions(admin: KubernetesAdapter, team: Team) -> list[dict[str, Any]]:
    """KAI's "Evict" events on the team's pod groups, as its scheduler records them."""
    return [e for e in admin.list("v1", "Event", team.namespace)
            if e.get("reason") == "Evict"
            and (e.get("involvedObject") or {}).get("kind") == "PodGroup"]


def set_up(portal: Portal, admin: KubernetesAdapter) -> None:
    host.add_fleet(admin, [pool_node()])
    print(f"machine {POOL_NODE}: {POOL_GPUS} x {H200} joins the host", flush=True)
    # The worker reads the host's nodes each resync; the class appears with them.
    demo.wait_until(lambda: demo.has_ready_gpus(portal, H200),
                    f"the portal to see Ready {H200} GPUs", 90.0)
    teams = (BORROWER, OWNER)
    demo.create_tenants(portal, teams)
    portal.call("PUT", f"/tenants/{BORROWER.tenant}/burst-policy",
                {"tier": "burst", "burst_gpus": BURST_GPUS})
    print(f"burst {BORROWER.tenant}: up to {BURST_GPUS} GPUs beyond its guarantee", flush=True)
    for team in teams:
        demo.grant_quota(portal, team)
        demo.create_cluster(portal, team)


def run(env: Mapping[str, str], folder: Path) -> Report:
    portal, admin, kubectl = demo.clients(env)
    folder.mkdir(parents=True, exist_ok=True)
    report = Report()
    try:
        print("== one pool of 8, two tenants: one guaranteed 2 and bursting, one 4", flush=True)
        set_up(portal, admin)
        for team in (BORROWER, OWNER):
            demo.wait_ready(portal, team)
        kubeconfigs = {team: demo.issue_kubeconfig(portal, team, folder)
                       for team in (BORROWER, OWNER)}
        with watching(admin, portal) as watch:
            burst_onto_idle_gpus(report, admin, kubectl, kubeconfigs[BORROWER])
            check_portal_sees_burst(report, portal, burst=POOL_GPUS - BORROWER.gpus)
            watch.mark()
            reclaim_for_the_owner(report, admin, kubectl, kubeconfigs[OWNER], watch)
            check_borrower(report, admin, kubectl, kubeconfigs[BORROWER], watch)
            check_portal_sees_burst(report, portal,
                                    burst=POOL_GPUS - OWNER.gpus - BORROWER.gpus)
            check_audit(report, portal)
            within_the_tenant(report, portal, admin, kubectl, folder, watch)
            check_ledger(report, portal, watch)
    except DemoError as error:
        report.check("the reclaim scenario ran to its end", False, str(error))
    finally:
        admin.close()
    return report


def burst_onto_idle_gpus(report: Report, admin: KubernetesAdapter, kubectl: walk.Kubectl,
                         kubeconfig: Path) -> None:
    print(f"== {BORROWER.tenant} runs {POOL_GPUS} pods on its guarantee of "
          f"{BORROWER.gpus}", flush=True)
    kubectl.apply(kubeconfig, [sweep_deployment(POOL_GPUS)])
    bound = demo.wait_until(lambda: demo.at_least(bound_pods(admin, BORROWER), POOL_GPUS),
                            f"{POOL_GPUS} of {BORROWER.label}'s pods to be bound",
                            demo.RUNNING_TIMEOUT)
    nodes = {p["spec"]["nodeName"] for p in bound}
    report.check(f"{BORROWER.label}: bursts onto the idle GPUs, bound by KAI",
                 len(bound) == POOL_GPUS and nodes == {POOL_NODE},
                 f"{len(bound)} pods bound on {sorted(nodes)}: {BORROWER.gpus} guaranteed, "
                 f"{len(bound) - BORROWER.gpus} borrowed")


def reclaim_for_the_owner(report: Report, admin: KubernetesAdapter, kubectl: walk.Kubectl,
                          kubeconfig: Path, watch: Watch) -> None:
    """The owner applies its pods while ``watch`` follows the borrower's; done once the
    owner's are bound and KAI had ten more seconds to take anything else."""
    print(f"== {OWNER.tenant} submits {OWNER.gpus} pods: its guarantee, all in use by "
          f"{BORROWER.tenant}", flush=True)
    started = time.monotonic()
    kubectl.apply(kubeconfig, demo.workload_manifests(OWNER))
    demo.wait_until(lambda: demo.at_least(bound_pods(admin, OWNER), OWNER.gpus),
                    f"{OWNER.gpus} of {OWNER.label}'s pods to be bound", RECLAIM_TIMEOUT)
    took = time.monotonic() - started
    time.sleep(10.0)
    owned = bound_pods(admin, OWNER)
    evicted = f"{watch.first_gone_after:.1f}" if watch.first_gone_after is not None else "?"
    report.check(f"{OWNER.label}: its {OWNER.gpus} guaranteed GPUs bound by reclaim",
                 len(owned) == OWNER.gpus,
                 f"{len(owned)} bound {took:.1f} s after kubectl apply (the first borrowed pod "
                 f"taken after {evicted} s)")
    print(f"reclaim bound {OWNER.label}'s {OWNER.gpus} pods in {took:.1f} s", flush=True)


def check_borrower(report: Report, admin: KubernetesAdapter, kubectl: walk.Kubectl,
                   kubeconfig: Path, watch: Watch) -> None:
    kept = bound_pods(admin, BORROWER)
    report.check(f"{BORROWER.label}: kept its guarantee throughout",
                 watch.fewest >= BORROWER.gpus,
                 f"never fewer than {watch.fewest} bound (guaranteed {BORROWER.gpus})")
    report.check(f"{BORROWER.label}: only borrowed GPUs were reclaimed, as many as needed",
                 len(watch.gone) == OWNER.gpus and len(kept) == POOL_GPUS - OWNER.gpus,
                 f"{len(watch.gone)} pods reclaimed, {len(kept)} still bound "
                 f"({BORROWER.gpus} guaranteed + {len(kept) - BORROWER.gpus} borrowed)")
    events = evictions(admin, BORROWER)
    actions = {(e.get("metadata", {}).get("annotations") or {}).get("evictor-action-type")
               for e in events}
    report.check(f"{BORROWER.label}: KAI says it reclaimed them, and for whom",
                 len(events) == OWNER.gpus and actions == {"reclaim"},
                 f"{len(events)} Evict events, actions {sorted(map(str, actions))}: "
                 f"{(events[0].get('message') or '')[:160] if events else 'none'}")
    waiting = demo.wait_until(lambda: _pending(kubectl, kubeconfig, OWNER.gpus),
                              f"{OWNER.gpus} of {BORROWER.label}'s replicas to wait", 60.0)
    owned = bound_pods(admin, OWNER)
    report.check(f"{BORROWER.label}: its new replicas wait for idle GPUs, taking none back",
                 len(waiting) == OWNER.gpus and len(owned) == OWNER.gpus,
                 f"{len(waiting)} replicas Pending in the virtual cluster; {OWNER.label} "
                 f"keeps {len(owned)} bound")


def check_portal_sees_burst(report: Report, portal: Portal, burst: int) -> None:
    """The cluster, the tenant's quota and the fleet say what KAI allocated beyond the
    guarantee, once the worker has read the host (each resync)."""
    def shown() -> tuple[Any, ...] | None:
        in_use = portal.cluster(BORROWER).get("gpus_in_use") or {}
        quota = [q for q in portal.call("GET", f"/tenants/{BORROWER.tenant}/quota")["items"]
                 if q["gpu_class"] == H200]
        fleet = [h for h in portal.call("GET", "/fleet/capacity")["hosts"]
                 if h["gpu_class"] == H200]
        found = (in_use.get("guaranteed"), in_use.get("burst"), in_use.get("reclaimable"),
                 quota[0].get("burst_in_use_gpus") if quota else None,
                 fleet[0]["borrowed"] if fleet else None,
                 fleet[0]["lent_from_idle_guarantees"] if fleet else None)
        return found if found[1] == burst and found[3] == burst and found[4] == burst else None
    # The pool's GPUs no cluster is guaranteed are lent first; the rest are idle guarantees.
    lent = max(0, burst - (POOL_GPUS - BORROWER.gpus - OWNER.gpus))
    found = demo.wait_until(shown, f"the portal to show {burst} burst GPUs", 90.0)
    report.check(f"{BORROWER.label}: the portal shows {burst} burst GPUs, reclaimable",
                 found == (float(BORROWER.gpus), float(burst), burst > 0, float(burst),
                           float(burst), float(lent)),
                 f"cluster {found[0]:g} guaranteed + {found[1]:g} burst (reclaimable: "
                 f"{found[2]}); quota burst {found[3]:g}; fleet borrowed {found[4]:g}, lent from "
                 f"idle guarantees {found[5]:g}")


def within_the_tenant(report: Report, portal: Portal, admin: KubernetesAdapter,
                      kubectl: walk.Kubectl, folder: Path, watch: Watch) -> None:
    """Northwind's new cluster, guaranteed 1 GPU, takes it from its own sweep's borrowed
    GPUs (the sweep's leaf is over its quota, the new one under its own), not from contoso."""
    print(f"== {BORROWER.tenant} gets 1 more GPU for a second cluster, {EVAL.label}",
          flush=True)
    demo.grant_quota(portal, EVAL)
    demo.create_cluster(portal, EVAL)
    demo.wait_ready(portal, EVAL)
    before = len(watch.gone)
    kubectl.apply(demo.issue_kubeconfig(portal, EVAL, folder), demo.workload_manifests(EVAL))
    bound = demo.wait_until(lambda: demo.at_least(bound_pods(admin, EVAL), 1),
                            f"{EVAL.label}'s pod to be bound", RECLAIM_TIMEOUT)
    time.sleep(5.0)
    sweep, owned = bound_pods(admin, BORROWER), bound_pods(admin, OWNER)
    report.check(f"{EVAL.label}: its guarantee comes from its own tenant's borrowed GPUs",
                 len(bound) == 1 and len(owned) == OWNER.gpus
                 and len(watch.gone) - before == 1 and len(sweep) >= BORROWER.gpus,
                 f"{EVAL.label} bound; {BORROWER.label} {len(sweep)} bound after "
                 f"{len(watch.gone) - before} more reclaimed; {OWNER.label} keeps {len(owned)}")


def check_ledger(report: Report, portal: Portal, watch: Watch) -> None:
    """Today's GPU-hours of the borrowing cluster (the per-cluster report), guaranteed and
    burst: exactly what the worker's samples say (each stands until the next, at most its
    hold), and those follow the GPU-seconds its pods held on the host within the samples'
    lag: after each change on the host, up to the longest wait between two samples and one
    more resync for KAI to update its queue's figures."""
    asked = time.time()
    rows = [r for r in portal.call("GET", "/usage/clusters",
                                   query={"tenant": BORROWER.tenant})["rows"]
            if r["cluster"] == BORROWER.cluster]
    answered = time.time()
    ledger = (sum(r["used_gpu_hours"] for r in rows) * 3600,
              sum(r["guaranteed_gpu_hours"] for r in rows) * 3600,
              sum(r["burst_gpu_hours"] for r in rows) * 3600)
    owed = owed_by_samples(watch.samples, sample_hold(WORKER_RESYNC_SECONDS), asked)
    # The ledger's "now" is a whole second between asking and the answer.
    rounding = (answered - asked + 1) * (watch.samples[-1].used if watch.samples else 0) + 1
    interval = longest_interval(watch.samples)
    late = interval + WORKER_RESYNC_SECONDS
    report.check(f"{BORROWER.label}: the ledger adds up the worker's samples, guaranteed and "
                 "burst",
                 len(watch.samples) > 2 and abs(ledger[0] - owed[0]) <= rounding
                 and abs(ledger[2] - owed[1]) <= rounding
                 and abs(ledger[1] + ledger[2] - ledger[0]) < 0.05,
                 f"ledger {ledger[1] / 60:.2f} guaranteed + {ledger[2] / 60:.2f} burst "
                 f"GPU-minutes; {len(watch.samples)} samples owe {(owed[0] - owed[1]) / 60:.2f}"
                 f" + {owed[1] / 60:.2f}")
    held = watch.held.seconds - watch.burst.seconds
    report.check(f"{BORROWER.label}: the ledger splits its GPU-hours into guaranteed and burst, "
                 "as bound",
                 abs(ledger[0] - watch.held.seconds) <= late * watch.held.variation
                 and abs(ledger[2] - watch.burst.seconds) <= late * watch.burst.variation
                 and ledger[2] > 0,
                 f"ledger {ledger[1] / 60:.2f} guaranteed + {ledger[2] / 60:.2f} burst "
                 f"GPU-minutes; the host's pods held {held / 60:.2f} + "
                 f"{watch.burst.seconds / 60:.2f} (samples at most {interval:.0f} s apart: each "
                 f"change up to {late:.0f} s late)")


def check_audit(report: Report, portal: Portal) -> None:
    """The portal's worker reads KAI's events each resync: the borrower's trail names its
    reclaimed pods, and not the tenant they went to."""
    def reclaimed() -> list[dict[str, Any]] | None:
        found = portal.call("GET", "/audit", query={"action": "cluster.gpu_reclaimed",
                                                    "tenant": BORROWER.tenant})["items"]
        return found if len(found) >= OWNER.gpus else None
    rows = demo.wait_until(reclaimed, f"{BORROWER.tenant}'s audit trail to show the reclaims",
                           90.0)
    pods = sorted(r["after"]["pod"] for r in rows)
    leaks = [r for r in rows if OWNER.tenant in str(r)]
    report.check(f"{BORROWER.label}: the portal's audit trail says which pods and why",
                 len(rows) == OWNER.gpus and all(p.startswith(SWEEP) for p in pods)
                 and not leaks,
                 f"{len(rows)} cluster.gpu_reclaimed: {pods}; "
                 f"{rows[0]['after']['why'] if rows else ''}")


def _pending(kubectl: walk.Kubectl, kubeconfig: Path, count: int) -> list[str] | None:
    pods = kubectl.pods(kubeconfig, "-n", "default", "-l", f"app={SWEEP}")
    pending = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Pending"
               and not p["metadata"].get("deletionTimestamp")]
    return pending if len(pending) >= count else None

