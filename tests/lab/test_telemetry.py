"""The lab's telemetry after the three teams' walk: its Prometheus scrapes the portal's web and
worker addresses and the played DCGM exporter, whose series follow what KAI bound on kwok's
GPU nodes, and the worker's helm installs are counted there."""

from __future__ import annotations

from collections import Counter
from typing import Any

from app.kube.adapter import KubernetesAdapter
from app.lab import demo, walk
from app.lab.gpu import KWOK_NODE
from app.lab.main import Lab
from app.utilisation.mapping import POD_LABELS
from tests.lab import groups
from tests.support.prometheus import Prometheus
from tests.support.waiting import wait_for

pytestmark = groups.TEAMS

JOBS = ("portal-web", "portal-worker", "dcgm-exporter")


def test_prometheus_sees_the_portal_and_a_gpu_series_for_each_gpu_kai_bound(
        lab: Lab, walked: walk.Report) -> None:
    prometheus = Prometheus(lab.telemetry.url, lab.telemetry.prometheus.log)
    host = lab.server.adapter()
    try:
        for job in JOBS:
            prometheus.wait_for_scrape(job, timeout=60)
        assert prometheus.rule_groups(), "the portal's alert rules are loaded"
        # What is bound may still move (a pod of the walk's being deleted): the two agree
        # within a few scrapes.
        bound = wait_for(lambda: _agreeing(host, prometheus),
                         lambda: f"bound GPUs by node: host {_bound_on_host(host)}, "
                                 f"Prometheus {_bound_in_prometheus(prometheus)}", timeout=60)
        assert sum(bound.values()) >= sum(t.workload.gpus_each for t in demo.TEAMS)
        every = Counter(s["metric"]["Hostname"]
                        for s in prometheus.query("DCGM_FI_DEV_GPU_UTIL"))
        assert every == _gpus_of_kwok_nodes(host)  # bound or free, every GPU has its series
        # Over the last hour: a test of the group may have restarted the portal since.
        installs = prometheus.value('sum(max_over_time(portal_helm_install_duration_seconds'
                                    '_count{job="portal-worker"}[1h]))')
        assert installs is not None and installs >= len(demo.TEAMS)
    finally:
        host.close()
        prometheus.close()


def _agreeing(host: KubernetesAdapter, prometheus: Prometheus) -> dict[str, int] | None:
    on_host = _bound_on_host(host)
    return on_host if on_host and on_host == _bound_in_prometheus(prometheus) else None


def _bound_on_host(host: KubernetesAdapter) -> dict[str, int]:
    """GPUs held by pods bound to each node (not finished, not being deleted)."""
    held: Counter[str] = Counter()
    for pod in host.list("v1", "Pod"):
        node = pod["spec"].get("nodeName")
        finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if node and not finished and not pod["metadata"].get("deletionTimestamp"):
            held[node] += demo.gpus_of(pod)
    return {node: count for node, count in held.items() if count}


def _bound_in_prometheus(prometheus: Prometheus) -> dict[str, int]:
    """Series of a GPU a pod holds, by node."""
    return dict(Counter(s["metric"]["Hostname"] for s in prometheus.query("DCGM_FI_DEV_GPU_UTIL")
                        if _held(s)))


def _held(sample: dict[str, Any]) -> bool:
    return any(sample["metric"].get(label) for label in POD_LABELS)


def _gpus_of_kwok_nodes(host: KubernetesAdapter) -> Counter[str]:
    gpus: Counter[str] = Counter()
    for node in host.list("v1", "Node"):
        annotations = node["metadata"].get("annotations") or {}
        count = int((node.get("status") or {}).get("capacity", {}).get(demo.GPU, 0))
        if count and all(annotations.get(k) == v for k, v in KWOK_NODE.items()):
            gpus[node["metadata"]["name"]] = count
    return gpus
