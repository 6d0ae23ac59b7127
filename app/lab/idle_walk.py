"""GPUs held but idle, seen through the lab's Prometheus and acted on by the sleep policy.

A machine of 5 A100s (a class of its own) is shared by stark (2 GPUs, its pods computing: the
played DCGM exporter shows them at 85 %), wayne (2, its pods annotated 2 %: held, idle) and
oscorp (1, bursting, 3 pods: 1 runs, 2 wait). stark's cluster page knows its utilisation
within two scrapes of its pods running; after the idle window (1 minute in the lab) wayne is
on the admins' idle-GPU view and in the worker's ``portal_tenant_idle_gpus``; with a sleep
policy idle on utilisation wayne's cluster goes to sleep and KAI binds oscorp's waiting pods on
the GPUs it gave back, while stark, under the same policy, stays awake. ``without_prometheus``
(the suite's test, which can stop the lab's Prometheus) checks the portal says "unknown" and
never fails while it is down.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import httpx

from app.kube.adapter import KubernetesAdapter
from app.lab import demo, host
from app.lab.dcgm import UTILISATION_ANNOTATION
from app.lab.demo import Portal
from app.lab.main import LabOptions
from app.lab.prometheus import Telemetry
from app.lab.reclaim import bound_pods, pool_node
from app.lab.walk import DemoError, Report, Team, Workload

A100 = "NVIDIA-A100-SXM4-40GB"
MACHINE = "a100-u1-n1"
MACHINE_GPUS = 5
BUSY = Team("stark", "Stark Industries", "render", A100, 2, "shared-pool",
            Workload(pods=("render-0", "render-1"), gpus_each=1))
IDLE = Team("wayne", "Wayne Enterprises", "notebook", A100, 2, "shared-pool",
            Workload(pods=("notebook-0", "notebook-1"), gpus_each=1))
BORROWER = Team("oscorp", "Oscorp", "batch", A100, 1, "shared-pool",
                Workload(pods=("batch-0", "batch-1", "batch-2"), gpus_each=1))
UTILISATION = {BUSY.tenant: 85.0, IDLE.tenant: 2.0, BORROWER.tenant: 50.0}
POLICY = {"sleep_after_idle_minutes": 5, "idle_measure": "utilisation"}
SCRAPE_SECONDS = float(LabOptions.scrape_interval.removesuffix("s"))
# The exporter's reading is cached up to a second, and the API's answer takes its own time.
KNOWN_SLACK_SECONDS = 2.0
# The idle window is 1 minute in the lab; the worker's gauge is cached 30 s.
IDLE_TIMEOUT = 150.0
SLEEP_TIMEOUT = 120.0
T = TypeVar("T")
ERROR_LINE = re.compile(r'" 5\d\d$')


def run(env: Mapping[str, str], folder: Path) -> Report:
    portal, admin, kubectl = demo.clients(env)
    folder.mkdir(parents=True, exist_ok=True)
    report = Report()
    prometheus = httpx.Client(base_url=env["PROMETHEUS_URL"], trust_env=False, timeout=10)
    try:
        print("== a machine of 5 A100s: stark computes, wayne idles, oscorp waits", flush=True)
        set_up(portal, admin)
        configs = {team: demo.issue_kubeconfig(portal, team, folder)
                   for team in (BUSY, IDLE, BORROWER)}
        kubectl.apply(configs[IDLE], annotated_pods(IDLE))
        _wait_bound(admin, IDLE, IDLE.gpus)
        kubectl.apply(configs[BUSY], annotated_pods(BUSY))
        known_within_two_scrapes(report, portal, admin)
        kubectl.apply(configs[BORROWER], annotated_pods(BORROWER))
        _wait_bound(admin, BORROWER, BORROWER.gpus)
        demo.wait_until(lambda: _in_use(portal, BUSY) == BUSY.gpus,
                        f"the portal to see {BUSY.label}'s GPUs in use", 90.0)
        _policy(portal, BUSY, POLICY)
        flagged_idle(report, portal, prometheus)
        idle_sleeps(report, portal, admin)
    except DemoError as error:
        report.check("the idle-GPU walk ran to its end", False, str(error))
    finally:
        prometheus.close()
        admin.close()
    return report


def set_up(portal: Portal, admin: KubernetesAdapter) -> None:
    node = pool_node()
    node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = MACHINE
    node["metadata"]["labels"]["nvidia.com/gpu.product"] = A100
    node["metadata"]["labels"]["nvidia.com/gpu.count"] = str(MACHINE_GPUS)
    node["metadata"]["labels"]["nvidia.com/gpu.memory"] = "40960"
    for part in ("capacity", "allocatable"):
        node["status"][part]["nvidia.com/gpu"] = str(MACHINE_GPUS)
    host.add_fleet(admin, [node])
    demo.wait_until(lambda: demo.has_ready_gpus(portal, A100),
                    f"the portal to see Ready {A100} GPUs", 90.0)
    teams = (BUSY, IDLE, BORROWER)
    demo.create_tenants(portal, teams)
    portal.call("PUT", f"/tenants/{BORROWER.tenant}/burst-policy", {"tier": "burst"})
    for team in teams:
        demo.grant_quota(portal, team)
        demo.create_cluster(portal, team)
    for team in teams:
        demo.wait_ready(portal, team)


def annotated_pods(team: Team) -> list[dict[str, Any]]:
    """The team's pods, each saying how busy its GPU is (vCluster copies the annotation to the
    host pod, where the played exporter reads it)."""
    pods = demo.workload_manifests(team)
    for pod in pods:
        pod["metadata"]["annotations"] = {UTILISATION_ANNOTATION: str(UTILISATION[team.tenant])}
    return pods


def known_within_two_scrapes(report: Report, portal: Portal, admin: KubernetesAdapter) -> None:
    print(f"== {BUSY.label}: its utilisation on its cluster page within two scrapes", flush=True)
    if not _poll(lambda: _running(admin, BUSY), demo.RUNNING_TIMEOUT):
        raise DemoError(f"{BUSY.label}'s pods did not run within {demo.RUNNING_TIMEOUT:.0f} s")
    running_at = time.monotonic()
    shown = _poll(lambda: _utilisation_near(portal, BUSY), 60.0)
    took = time.monotonic() - running_at
    bound = 2 * SCRAPE_SECONDS + KNOWN_SLACK_SECONDS
    report.check(f"{BUSY.label}: its utilisation is known within two scrapes of its pods running",
                 shown is not None and took <= bound,
                 f"{shown and shown['utilisation_percent']} % of {shown and shown['gpus_bound']} "
                 f"GPUs shown {took:.1f} s after its pods ran (bound {bound:.0f} s)")


def flagged_idle(report: Report, portal: Portal, prometheus: httpx.Client) -> None:
    print(f"== {IDLE.label}: flagged idle after the 1-minute window", flush=True)
    started = time.monotonic()
    # Each GPU is idle a window after its own pod ran: the second may follow the first.
    idle = demo.settled(lambda: _idle_of(portal, IDLE), lambda found: len(found) >= IDLE.gpus,
                        IDLE_TIMEOUT)
    took = time.monotonic() - started
    report.check(f"{IDLE.label}: its GPUs on the admins' idle-GPU view",
                 len(idle) == IDLE.gpus, f"{_shown(idle)}, {took:.0f} s after {BUSY.label}'s "
                 "utilisation was known")
    busy = _idle_of(portal, BUSY)
    report.check(f"{BUSY.label}: not on the idle-GPU view", not busy, f"{_shown(busy)}")
    gauge = demo.wait_until(lambda: _idle_gauge(prometheus, IDLE) == IDLE.gpus or None,
                            f"portal_tenant_idle_gpus of {IDLE.tenant} in Prometheus", 60.0)
    report.check(f"{IDLE.label}: portal_tenant_idle_gpus in the lab's Prometheus", bool(gauge),
                 f'portal_tenant_idle_gpus{{tenant="{IDLE.tenant}"}} = '
                 f"{_idle_gauge(prometheus, IDLE)}")


def idle_sleeps(report: Report, portal: Portal, admin: KubernetesAdapter) -> None:
    print(f"== {IDLE.label} and {BUSY.label}: sleep after 5 idle minutes, idle on utilisation",
          flush=True)
    started = time.monotonic()
    _policy(portal, IDLE, POLICY)
    asleep = demo.wait_until(lambda: _asleep(portal, IDLE), f"{IDLE.label} to sleep",
                             SLEEP_TIMEOUT)
    took = time.monotonic() - started
    report.check(f"{IDLE.label}: asleep on idle utilisation",
                 asleep["power"]["reason"] == "idle",
                 f"asleep {took:.1f} s after its policy was set ({asleep['power']['reason']})")
    lent = demo.wait_until(lambda: demo.at_least(bound_pods(admin, BORROWER), 3),
                           f"{BORROWER.label}'s waiting pods to be bound", SLEEP_TIMEOUT)
    report.check(f"{BORROWER.label}: its waiting pods bound on the GPUs {IDLE.label} gave back",
                 len(lent) == len(BORROWER.workload.pods),
                 f"{len(lent)} of {BORROWER.label}'s pods bound on {MACHINE}")
    check_awake(report, portal, "under the same policy")


def check_awake(report: Report, portal: Portal, when: str) -> None:
    cluster = portal.cluster(BUSY)
    report.check(f"{BUSY.label}: stays awake {when}",
                 cluster["phase"] != "Sleeping" and not cluster["power"]["asleep_since"],
                 f"phase {cluster['phase']}, policy {cluster['sleep_policy'].get('idle_measure')}")


def without_prometheus(report: Report, env: Mapping[str, str], portal_log: Path,
                       telemetry: Telemetry) -> None:
    """Prometheus stopped: every figure unknown, every page answered, nothing slept for it;
    started again, every target up (``start`` raises otherwise)."""
    portal = Portal(env["PORTAL_URL"], env["PORTAL_TOKEN"])
    print("== the lab's Prometheus stopped", flush=True)
    logged = portal_log.stat().st_size
    telemetry.stop_prometheus()
    try:
        api = portal.call("GET", f"/tenants/{BUSY.tenant}/clusters/{BUSY.cluster}/utilisation")
        report.check(f"{BUSY.label}: the API says its utilisation is unknown",
                     api["known"] is False and api["utilisation_percent"] is None,
                     f"known {api['known']}: {api['reason']}")
        idle = portal.call("GET", "/admin/idle-gpus")
        report.check("the admins' idle-GPU API says unknown",
                     idle["known"] is False and idle["items"] is None, f"{idle['reason']}")
        page = portal.client.get(f"/t/{BUSY.tenant}/clusters/{BUSY.cluster}")
        # The page's utilisation panel is loaded after it, and says why it is unknown.
        pages = [portal.client.get(path) for path in (
            f"/t/{BUSY.tenant}/clusters/{BUSY.cluster}/utilisation", "/admin/idle-gpus")]
        report.check("the cluster page answers; its utilisation panel and the idle-GPU view "
                     "say unknown",
                     page.status_code == 200 and all(
                         p.status_code == 200 and "<strong>unknown</strong>" in p.text
                         for p in pages),
                     f"{page.status_code}, {[p.status_code for p in pages]}")
        time.sleep(4 * SCRAPE_SECONDS)  # several passes of the sped-up sleep policy
        check_awake(report, portal, "while Prometheus is down")
        errors = [line for line in _log_since(portal_log, logged) if ERROR_LINE.search(line)]
        report.check("no request failed while Prometheus was down", not errors,
                     f"{len(errors)} answers 5xx: {errors[:3]}")
    finally:
        portal.client.close()
        telemetry.start_prometheus()  # PrometheusError unless every target is up in time
    down = telemetry.prometheus.targets_down()
    report.check("Prometheus started again, every target up", not down,
                 f"jobs down: {down or 'none'}")


def _log_since(path: Path, offset: int) -> list[str]:
    with path.open("rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace").splitlines()


def _poll(probe: Callable[[], T | None], timeout: float) -> T | None:
    """Like ``demo.wait_until``, read every quarter second (the measure is seconds), and None
    past the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := probe():
            return found
        time.sleep(0.25)
    return None


def _running(admin: KubernetesAdapter, team: Team) -> bool | None:
    pods = [p for p in bound_pods(admin, team)
            if (p.get("status") or {}).get("phase") == "Running"]
    return len(pods) == team.gpus or None


def _utilisation_near(portal: Portal, team: Team) -> dict[str, Any] | None:
    shown: dict[str, Any] = portal.call(
        "GET", f"/tenants/{team.tenant}/clusters/{team.cluster}/utilisation")
    percent = shown.get("utilisation_percent")
    near = percent is not None and abs(percent - UTILISATION[team.tenant]) <= 1.0
    return shown if shown["known"] and near and shown["gpus_bound"] == team.gpus else None


def _idle_of(portal: Portal, team: Team) -> list[dict[str, Any]]:
    items = portal.call("GET", "/admin/idle-gpus")["items"] or []
    return [g for g in items if g["tenant"] == team.tenant and g["cluster"] == team.cluster]


def _shown(idle: list[dict[str, Any]]) -> str:
    return f"{len(idle)} idle: " + ", ".join(
        f"{g['pod']} now {g['utilisation_percent']} %, peak {g['peak_in_window_percent']} %"
        for g in idle)


def _idle_gauge(prometheus: httpx.Client, team: Team) -> float | None:
    answer = prometheus.get("/api/v1/query", params={
        "query": f'sum(portal_tenant_idle_gpus{{tenant="{team.tenant}"}})'})
    results = answer.json()["data"]["result"] if answer.status_code == 200 else []
    return float(results[0]["value"][1]) if results else None


def _policy(portal: Portal, team: Team, policy: dict[str, Any]) -> None:
    portal.call("PUT", f"/tenants/{team.tenant}/clusters/{team.cluster}/sleep-policy", policy)


def _in_use(portal: Portal, team: Team) -> float | None:
    in_use = portal.cluster(team).get("gpus_in_use") or {}
    return in_use.get("guaranteed")


def _asleep(portal: Portal, team: Team) -> dict[str, Any] | None:
    cluster: dict[str, Any] = portal.cluster(team)
    return cluster if cluster["power"]["asleep_since"] else None


def _wait_bound(admin: KubernetesAdapter, team: Team, count: int) -> None:
    demo.wait_until(lambda: demo.at_least(bound_pods(admin, team), count),
                    f"{count} of {team.label}'s pods to be bound", demo.RUNNING_TIMEOUT)
