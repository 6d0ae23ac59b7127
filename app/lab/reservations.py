"""The device report of KAI's GPU reservation pods, played for kwok's nodes.

To share one GPU between ``gpu-fraction`` pods, KAI v0.12's binder creates a reservation pod on
the chosen node (namespace ``kai-resource-reservation``, label ``app: kai-resource-reservation``
and the GPU group's ``runai-gpu-group``, one whole ``nvidia.com/gpu``, ``spec.nodeName`` set) and
waits for it to say which device it got: on a real node its image reads the one GPU the device
plugin gave it from NVML and writes that GPU's UUID into the annotation
``run.ai/reserve_for_gpu_index``. Without the annotation within the binder's allocation timeout
the reservation pod is deleted and the bind fails.

kwok runs the pod but no image, so ``ReservationPlayer`` writes what the image would: a GPU of
the node held by no other reservation pod, named ``GPU-<node>-<index>``. A node whose GPUs are
all held (by reservations and whole-GPU pods) gets no answer, as the device plugin would give
the pod no GPU.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from app.kube.errors import KubeError
from app.kube.manifests import labels as lbl
from app.kube.port import Manifest
from app.kube.quantities import parse_quantity
from app.lab.control_plane import fast_adapter

log = logging.getLogger(__name__)

# KAI v0.12's defaults (cmd/binder options, resource_reservation.go), which the lab keeps.
RESERVATION_NAMESPACE = "kai-resource-reservation"
RESERVATION_ACCOUNT = "kai-resource-reservation"
RESERVATION_APP = {"app": "kai-resource-reservation"}
GPU_INDEX = "run.ai/reserve_for_gpu_index"
GPU_GROUP = "runai-gpu-group"
# The reservation image's field manager, so the player's annotation is told apart.
MANAGER = "kai-resource-reservation"
POLL_SECONDS = 0.5
STOP_SECONDS = 10.0
_DONE_PHASES = ("Succeeded", "Failed")


def reservation_objects() -> list[Manifest]:
    """The namespace and ServiceAccount the binder creates its reservation pods in and under
    (KAI's chart makes them)."""
    return [{"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": RESERVATION_NAMESPACE}},
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": RESERVATION_ACCOUNT, "namespace": RESERVATION_NAMESPACE}}]


def device_id(node: str, index: int) -> str:
    """The played UUID of GPU ``index`` of ``node`` (a real one reads ``GPU-<uuid>``)."""
    return f"GPU-{node}-{index}"


def devices_to_report(reservations: Iterable[Manifest], nodes: Mapping[str, int],
                      whole_gpus: Mapping[str, int]) -> dict[str, str]:
    """The device each unanswered reservation pod gets, by pod name: on its node the lowest GPU
    index no reservation pod holds, as long as the node's GPUs (``nodes``: node → GPUs) are
    not all held by reservation pods and by whole-GPU pods (``whole_gpus``: node → GPUs)."""
    live = [p for p in reservations if _live(p) and p["spec"].get("nodeName")]
    held: dict[str, set[str]] = {}
    for pod in live:
        device = _annotations(pod).get(GPU_INDEX)
        if device:
            held.setdefault(pod["spec"]["nodeName"], set()).add(device)
    answers: dict[str, str] = {}
    for pod in sorted(live, key=lambda p: p["metadata"].get("creationTimestamp") or ""):
        node = pod["spec"]["nodeName"]
        if _annotations(pod).get(GPU_INDEX):
            continue
        taken = held.setdefault(node, set())
        gpus = nodes.get(node, 0)
        if len(taken) + whole_gpus.get(node, 0) >= gpus:
            continue
        device = next(device_id(node, i) for i in range(gpus) if device_id(node, i) not in taken)
        taken.add(device)
        answers[pod["metadata"]["name"]] = device
    return answers


def whole_gpus_by_node(pods: Iterable[Manifest]) -> dict[str, int]:
    """Whole GPUs held on each node by bound pods other than reservation pods."""
    held: dict[str, int] = {}
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if not node or not _live(pod) or pod["metadata"].get("namespace") == \
                RESERVATION_NAMESPACE:
            continue
        held[node] = held.get(node, 0) + int(_gpu_limit(pod))
    return held


def _gpu_limit(pod: Manifest) -> Decimal:
    total = Decimal(0)
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or resources.get("requests") or {}).get(
            lbl.GPU_RESOURCE)
        total += parse_quantity(value) if value is not None else Decimal(0)
    return total


def _live(pod: Manifest) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and \
        (pod.get("status") or {}).get("phase") not in _DONE_PHASES


def _annotations(pod: Manifest) -> dict[str, Any]:
    return pod["metadata"].get("annotations") or {}


class ReservationPlayer:
    """Answers the binder's reservation pods from a daemon thread, every ``interval``
    seconds, on its own connection to the host; ``stop()`` ends it."""

    def __init__(self, admin_kubeconfig: str, interval: float = POLL_SECONDS) -> None:
        self.admin = fast_adapter(admin_kubeconfig)
        self.interval = interval
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name="reservation-player", daemon=True)
        self.reported: dict[str, str] = {}  # pod name → device, for a person and the tests

    def start(self) -> ReservationPlayer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(STOP_SECONDS)
        self.admin.close()

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            try:
                self.step()
            except KubeError as error:
                log.warning("reservation player: %s", error)

    def step(self) -> None:
        reservations = self.admin.list("v1", "Pod", RESERVATION_NAMESPACE,
                                       label_selector=RESERVATION_APP)
        if not any(not _annotations(p).get(GPU_INDEX) for p in reservations):
            return
        nodes = {n["metadata"]["name"]: int(parse_quantity(
                 ((n.get("status") or {}).get("allocatable") or {}).get(lbl.GPU_RESOURCE, "0")))
                 for n in self.admin.list("v1", "Node")}
        whole = whole_gpus_by_node(self.admin.list("v1", "Pod"))
        for name, device in devices_to_report(reservations, nodes, whole).items():
            # Applied, not created: a pod deleted meanwhile is refused (a pod needs a spec).
            self.admin.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": name, "namespace": RESERVATION_NAMESPACE,
                "annotations": {GPU_INDEX: device}}}, force=True, manager=MANAGER)
            self.reported[name] = device
            log.info("reservation pod %s reports %s", name, device)
