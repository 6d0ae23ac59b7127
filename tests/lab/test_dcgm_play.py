"""The lab's DCGM exporter against a real API server (no lab): what it serves for kwok's GPU
nodes and the pods bound to them is what the real exporter would, and what the portal's
utilisation mapping reads."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.kube.adapter import KubernetesAdapter
from app.lab import host
from app.lab.dcgm import MEMORY_ANNOTATION, UTILISATION_ANNOTATION, PlayedDcgmExporter
from app.lab.dcgm import bounded_adapter as exporter_adapter
from app.lab.gpu import gpu_node
from app.utilisation.mapping import Owner, Ownership, owner_of
from tests.support.kube_server import ApiServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kube_server

GPU_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
              "DCGM_FI_DRIVER_VERSION"}
POD_LABELS = {"container", "namespace", "pod"}
COUNTERS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
            "DCGM_FI_DEV_POWER_USAGE")
H100 = "NVIDIA-H100-80GB-HBM3"


@dataclass
class Played:
    kube: KubernetesAdapter
    exporter: PlayedDcgmExporter
    namespace: str
    h100: str
    l40s: str
    plain: str

    def scrape(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """Each counter's series on this test's nodes (the server is shared)."""
        text = httpx.get(self.exporter.url, timeout=10).text
        ours = {self.h100, self.l40s, self.plain}
        found: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.labels.get("Hostname") in ours:
                    found.setdefault(sample.name, []).append(
                        (dict(sample.labels), sample.value))
        return found

    def by_gpu(self, node: str, counter: str = "DCGM_FI_DEV_GPU_UTIL",
               ) -> dict[int, tuple[dict[str, str], float]]:
        return {int(labels["gpu"]): (labels, value)
                for labels, value in self.scrape().get(counter, [])
                if labels["Hostname"] == node}

    def pod(self, name: str, node: str, gpus: dict[str, int],
            annotations: dict[str, str] | None = None) -> None:
        containers = [{"name": container, "image": "registry.k8s.io/pause:3.10",
                       "resources": {"limits": {"nvidia.com/gpu": str(count)}}}
                      for container, count in gpus.items()]
        self.kube.apply({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": name, "namespace": self.namespace,
                                      "annotations": annotations or {}},
                         "spec": {"nodeName": node, "containers": containers}}, force=True)


@pytest.fixture(scope="module")
def played(bare_api: ApiServer) -> Iterator[Played]:
    kube = bare_api.adapter()
    tag = uuid.uuid4().hex[:8]
    namespace = f"t-dcgm{tag}-train"
    nodes = [gpu_node(f"dcgm-{tag}-h100", H100, 4, **{"nvidia.com/gpu.memory": "81559"}),
             gpu_node(f"dcgm-{tag}-l40s", "NVIDIA-L40S", 2),
             gpu_node(f"dcgm-{tag}-plain", H100, 2)]
    nodes[2]["metadata"]["annotations"] = {}  # a GPU node kwok does not keep: not played
    host.add_fleet(kube, nodes)
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    # No controller-manager here: the ServiceAccount admission plugin needs "default".
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": namespace}}, force=True)
    exporter = PlayedDcgmExporter(exporter_adapter(bare_api.admin_kubeconfig), "127.0.0.1",
                                  0).start()
    try:
        yield Played(kube, exporter, namespace, *(n["metadata"]["name"] for n in nodes))
    finally:
        exporter.stop()
        _delete_pods(kube, namespace)
        for node in nodes:
            kube.delete("v1", "Node", node["metadata"]["name"])
        kube.delete("v1", "Namespace", namespace)
        kube.close()


@pytest.fixture(autouse=True)
def no_pods_after(played: Played) -> Iterator[None]:
    """Each test starts on free GPUs, whatever ran before it."""
    yield
    _delete_pods(played.kube, played.namespace)
    wait_for(lambda: _with_pods(played, 0, exactly=True), "every GPU free again")


def _delete_pods(kube: KubernetesAdapter, namespace: str) -> None:
    for pod in kube.list("v1", "Pod", namespace):
        kube.delete("v1", "Pod", pod["metadata"]["name"], namespace, grace_period_seconds=0)


def test_every_gpu_of_a_kwok_node_is_served_with_the_exporters_labels_and_its_pod(
        played: Played) -> None:
    played.pod("train-0", played.h100, {"main": 2}, {UTILISATION_ANNOTATION: "85"})
    played.pod("eval-0", played.l40s, {"main": 1})
    served = wait_for(lambda: _with_pods(played, 3), "the exporter to show the two pods")

    for counter in COUNTERS:
        assert len(served[counter]) == 6, counter  # 4 H100 + 2 L40S; the plain node is not
    h100 = played.by_gpu(played.h100)
    assert sorted(h100) == [0, 1, 2, 3]
    for index in (0, 1):
        labels, value = h100[index]
        assert value == 85
        assert set(labels) == GPU_LABELS | POD_LABELS
        assert (labels["pod"], labels["namespace"], labels["container"]) == (
            "train-0", played.namespace, "main")
        assert labels["modelName"] == "NVIDIA H100 80GB HBM3"
        assert labels["device"] == f"nvidia{index}"
        assert labels["UUID"].startswith("GPU-")
    for index in (2, 3):  # free GPUs: no pod, and idle
        labels, value = h100[index]
        assert set(labels) == GPU_LABELS and value == 0
    assert len({labels["UUID"] for labels, _ in h100.values()}) == 4
    eval_gpu, eval_util = played.by_gpu(played.l40s)[0]
    assert eval_gpu["pod"] == "eval-0" and eval_util == 0  # no annotation: idle
    used = played.by_gpu(played.h100, "DCGM_FI_DEV_FB_USED")
    free = played.by_gpu(played.h100, "DCGM_FI_DEV_FB_FREE")
    assert used[0][1] == round(81559 * 0.85) and used[0][1] + free[0][1] == 81559


def test_the_portals_mapping_finds_the_cluster_of_a_bound_gpu_and_no_owner_of_a_free_one(
        played: Played) -> None:
    played.pod("map-0", played.l40s, {"main": 1}, {UTILISATION_ANNOTATION: "30"})
    wait_for(lambda: _pod_on(played, "map-0"), "map-0 in the exporter")
    cluster = Owner("dcgm", "train")
    ownership = Ownership(by_namespace={played.namespace: cluster}, by_node={})
    owners = {labels.get("pod"): owner_of(labels, ownership)
              for labels, _ in played.by_gpu(played.l40s).values()}
    assert owners.get("map-0") == cluster
    assert all(owner is None for pod, owner in owners.items() if pod is None)


def test_a_pod_keeps_its_gpus_while_others_come_and_go_and_its_annotation_is_followed(
        played: Played) -> None:
    played.pod("first-0", played.h100, {"a": 1, "b": 1})
    played.pod("second-0", played.h100, {"main": 1},
               {UTILISATION_ANNOTATION: "40", MEMORY_ANNOTATION: "1000"})
    before = wait_for(lambda: _pod_on(played, "second-0"), "second-0 in the exporter")
    second = _gpus_of(before, "second-0")
    first = _gpus_of(before, "first-0")
    assert len(first) == 2 and len(second) == 1
    assert {before[i][0]["container"] for i in first} == {"a", "b"}
    fb = played.by_gpu(played.h100, "DCGM_FI_DEV_FB_USED")
    assert fb[second[0]][1] == 1000

    played.kube.delete("v1", "Pod", "first-0", played.namespace, grace_period_seconds=0)
    played.pod("third-0", played.h100, {"main": 1})
    after = wait_for(lambda: _pod_on(played, "third-0"), "third-0 in the exporter")
    assert _gpus_of(after, "second-0") == second  # not renumbered when first-0 went
    assert _gpus_of(after, "third-0")[0] in first  # a freed GPU is given again
    assert not _gpus_of(after, "first-0")

    played.kube.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "second-0", "namespace": played.namespace,
        "annotations": {UTILISATION_ANNOTATION: "5"}}}, force=True, manager="tenant")
    wait_for(lambda: played.by_gpu(played.h100)[second[0]][1] == 5,
             "second-0's GPU at 5 % after its annotation changed")


def _with_pods(played: Played, count: int, *, exactly: bool = False,
               ) -> dict[str, list[tuple[dict[str, str], float]]] | None:
    """The scrape once ``count`` (or more, unless ``exactly``) GPUs show a pod."""
    served = played.scrape()
    bound = len([labels for labels, _ in served.get("DCGM_FI_DEV_GPU_UTIL", [])
                 if "pod" in labels])
    return served if bound == count or (bound > count and not exactly) else None


def _pod_on(played: Played, pod: str) -> dict[int, tuple[dict[str, str], float]] | None:
    found = played.by_gpu(played.h100) | {
        100 + i: v for i, v in played.by_gpu(played.l40s).items()}
    return found if _gpus_of(found, pod) else None


def _gpus_of(gpus: dict[int, tuple[dict[str, str], Any]], pod: str) -> list[int]:
    return sorted(i for i, (labels, _) in gpus.items() if labels.get("pod") == pod)


def test_a_scraper_that_hangs_up_costs_no_traceback_and_other_faults_still_do(
    played: Played, capfd: pytest.CaptureFixture[str]
) -> None:
    server = played.exporter.server
    for fault in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset")):
        try:
            raise fault
        except ConnectionError:
            server.handle_error(None, ("127.0.0.1", 40000))
    assert capfd.readouterr().err == ""
    try:
        raise KeyError("a bug in the exporter")
    except KeyError:
        server.handle_error(None, ("127.0.0.1", 40000))
    assert "a bug in the exporter" in capfd.readouterr().err
