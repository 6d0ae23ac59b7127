"""The NVIDIA DCGM exporter, played for the lab's GPU fleet: ``GET /metrics`` as the released
exporter (4.5.x) answers on a GPU node, for every GPU of every kwok node on the host.

kwok runs no container and there is no GPU, so what a GPU does is read from the host: its
Nodes (kwok's, with ``nvidia.com/gpu`` capacity; MIG nodes are not played) and the Pods bound
to them. Each GPU's series carry the exporter's labels (``gpu``, ``UUID``, ``pci_bus_id``,
``device``, ``modelName``, ``Hostname``, the ``DCGM_FI_DRIVER_VERSION`` label counter) and, for
a GPU a pod holds, the kubelet pod-resources mapping's ``container``, ``namespace`` and ``pod``
(the host pod: its ``t-<tenant>-<cluster>`` namespace and synced name). A free GPU shows 0 %
and no pod labels, as on a real node.

A pod's GPUs show the utilisation its annotation ``lab.gpu-tenant-portal.dev/gpu-utilisation``
(0-100, default 0) asks for, and as framebuffer that share of the node's GPU memory unless
``lab.gpu-tenant-portal.dev/gpu-memory-used-mib`` says otherwise. The annotation is read from
the **host** pod; a tenant sets it on its **virtual** pod with its own kubeconfig: vCluster's
pod syncer (0.30, ``translate.HostMetadata`` when it creates the host pod,
``AnnotationsBidirectionalUpdate`` when the virtual pod changes) copies a virtual pod's
annotations to the host pod, all but its own ``vcluster.loft.sh/*`` bookkeeping.

Which GPU of a node a pod holds stays put while it runs (a new pod takes the lowest free
indices, pods in creation order), as a GPU's series must for the idle window to read it
whole. Each scrape lists the host at most once a second (scrapes in between get the same page),
every call bounded by the adapter's timeout; at most ``MAX_SCRAPES`` are answered at once.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from app.kube.adapter import KubernetesAdapter
from app.kube.port import Manifest
from app.kube.retry import RetryPolicy
from app.lab.gpu import KWOK_NODE

log = logging.getLogger(__name__)

GPU = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB, as GPU Feature Discovery labels it
DRIVER_LABELS = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor",
                 "nvidia.com/cuda.driver.rev")
UTILISATION_ANNOTATION = "lab.gpu-tenant-portal.dev/gpu-utilisation"
MEMORY_ANNOTATION = "lab.gpu-tenant-portal.dev/gpu-memory-used-mib"
DEFAULT_MEMORY_MIB = 81559
DEFAULT_DRIVER = "570.124.06"
IDLE_WATTS, BUSY_WATTS = 70.0, 700.0
CACHE_SECONDS = 1.0
MAX_SCRAPES = 4
API_TIMEOUT_SECONDS = 5.0
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_UUIDS = uuid.UUID("9e0f3c52-55d7-4f0c-9a43-6c1f0b1e2d3a")

# The exporter's default counters these come from (etc/default-counters.csv): name, help.
UTIL = ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).")
FB_FREE = ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).")
FB_USED = ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).")
POWER = ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).")


@dataclass(frozen=True)
class Holder:
    """The container a GPU is bound to, as the kubelet's pod-resources API names it."""

    namespace: str
    pod: str
    container: str


@dataclass(frozen=True)
class PlayedGpu:
    node: str
    index: int
    model: str
    driver: str
    memory_mib: float
    utilisation: float = 0.0
    memory_used_mib: float = 0.0
    holder: Holder | None = None

    def labels(self) -> dict[str, str]:
        """In the exporter's order: the GPU's, ``Hostname``, label counters, pod's."""
        labels = {"gpu": str(self.index),
                  "UUID": f"GPU-{uuid.uuid5(_UUIDS, f'{self.node}/{self.index}')}",
                  "pci_bus_id": f"0000{self.index // 14:04X}:{0x18 + 0x10 * (self.index % 14):02X}"
                                ":00.0",
                  "device": f"nvidia{self.index}", "modelName": self.model,
                  "Hostname": self.node, "DCGM_FI_DRIVER_VERSION": self.driver}
        if self.holder is not None:
            labels |= {"container": self.holder.container, "namespace": self.holder.namespace,
                       "pod": self.holder.pod}
        return labels

    def values(self) -> dict[str, float]:
        power = IDLE_WATTS + (BUSY_WATTS - IDLE_WATTS) * self.utilisation / 100
        return {UTIL[0]: round(self.utilisation), FB_USED[0]: round(self.memory_used_mib),
                FB_FREE[0]: round(self.memory_mib - self.memory_used_mib),
                POWER[0]: round(power, 3)}


@dataclass
class StickyIndices:
    """Which GPU indices of a node each pod (by uid) holds: kept while the pod is bound,
    freed when it goes, the lowest free ones given to a new pod."""

    held: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)

    def assign(self, node: str, gpus: int,
               pods: Sequence[tuple[str, int]]) -> dict[str, tuple[int, ...]]:
        """``pods``: (uid, GPUs) in creation order; a pod that does not fit (more bound than
        the node has) holds none."""
        wanted = {uid for uid, _ in pods}
        kept = {uid: indices for uid, indices in self.held.get(node, {}).items()
                if uid in wanted}
        taken = {i for indices in kept.values() for i in indices}
        for uid, count in pods:
            if uid in kept or count <= 0:
                continue
            free = [i for i in range(gpus) if i not in taken][:count]
            if len(free) == count:
                kept[uid] = tuple(free)
                taken.update(free)
        self.held[node] = kept
        return kept

    def forget_other_nodes(self, nodes: set[str]) -> None:
        for node in set(self.held) - nodes:
            del self.held[node]


def bounded_adapter(admin_kubeconfig: str) -> KubernetesAdapter:
    """The exporter's own connection to the host: each call within ``API_TIMEOUT_SECONDS``,
    one retry."""
    return KubernetesAdapter.from_kubeconfig_yaml(
        admin_kubeconfig, qps=100.0, burst=100, timeout_seconds=API_TIMEOUT_SECONDS,
        retry=RetryPolicy(attempts=2, base_delay=0.2, max_delay=1.0))


class PlayedDcgmExporter:
    """``start()`` serves on ``host:port`` from a daemon thread; ``stop()`` ends it and closes
    ``adapter`` (the exporter's own)."""

    def __init__(self, adapter: KubernetesAdapter, host: str, port: int) -> None:
        self.adapter = adapter
        self.indices = StickyIndices()
        self._lock = threading.Lock()
        self._page: tuple[float, bytes] | None = None
        self._slots = threading.BoundedSemaphore(MAX_SCRAPES)
        handler = type("DcgmScrape", (_Scrape,), {"exporter": self})
        self.server = _ScrapeServer((host, port), handler)
        self.server.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/metrics"

    def start(self) -> PlayedDcgmExporter:
        threading.Thread(target=self.server.serve_forever, name="dcgm-exporter",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.adapter.close()

    def page(self) -> bytes:
        """The exposition, listed from the host at most once per ``CACHE_SECONDS``."""
        with self._lock:
            now = time.monotonic()
            if self._page is None or now - self._page[0] >= CACHE_SECONDS:
                self._page = (now, exposition(self.gpus()).encode())
            return self._page[1]

    def gpus(self) -> list[PlayedGpu]:
        """Every played GPU now, node by node, index by index."""
        nodes = [n for n in self.adapter.list("v1", "Node") if _played(n)]
        pods_by_node: dict[str, list[Manifest]] = {}
        for pod in self.adapter.list("v1", "Pod"):
            node = (pod.get("spec") or {}).get("nodeName")
            if node and _holds_gpus(pod):
                pods_by_node.setdefault(node, []).append(pod)
        self.indices.forget_other_nodes({n["metadata"]["name"] for n in nodes})
        played: list[PlayedGpu] = []
        for node in sorted(nodes, key=lambda n: str(n["metadata"]["name"])):
            played.extend(self._node_gpus(node, pods_by_node.get(node["metadata"]["name"], [])))
        return played

    def _node_gpus(self, node: Manifest, pods: list[Manifest]) -> Iterator[PlayedGpu]:
        name = node["metadata"]["name"]
        labels: Mapping[str, str] = node["metadata"].get("labels") or {}
        count = _quantity(node["status"]["capacity"].get(GPU))
        memory = _number(labels.get(MEMORY_LABEL), DEFAULT_MEMORY_MIB)
        base = PlayedGpu(node=name, index=0,
                         model=labels.get(PRODUCT_LABEL, "NVIDIA GPU").replace("-", " "),
                         driver=_driver(labels), memory_mib=memory)
        ordered = sorted(pods, key=lambda p: (p["metadata"].get("creationTimestamp", ""),
                                               p["metadata"]["uid"]))
        by_uid = {p["metadata"]["uid"]: p for p in ordered}
        held = self.indices.assign(name, count, [(uid, len(_gpu_containers(p)))
                                                  for uid, p in by_uid.items()])
        holders: dict[int, PlayedGpu] = {}
        for uid, indices in held.items():
            pod = by_uid[uid]
            util = min(100.0, max(0.0, _number(_annotation(pod, UTILISATION_ANNOTATION), 0.0)))
            used = _number(_annotation(pod, MEMORY_ANNOTATION), memory * util / 100)
            for index, container in zip(indices, _gpu_containers(pod), strict=False):
                holders[index] = PlayedGpu(
                    node=name, index=index, model=base.model, driver=base.driver,
                    memory_mib=memory, utilisation=util,
                    memory_used_mib=min(memory, max(0.0, used)),
                    holder=Holder(pod["metadata"]["namespace"], pod["metadata"]["name"],
                                  container))
        for index in range(count):
            yield holders.get(index) or PlayedGpu(
                node=name, index=index, model=base.model, driver=base.driver, memory_mib=memory)


def exposition(gpus: Sequence[PlayedGpu]) -> str:
    """The exporter's text: per counter its HELP and TYPE, then a line per GPU."""
    lines: list[str] = []
    for name, help_text in (UTIL, FB_FREE, FB_USED, POWER):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for gpu in gpus:
            labels = ",".join(f'{k}="{_escaped(v)}"' for k, v in gpu.labels().items())
            lines.append(f"{name}{{{labels}}} {gpu.values()[name]:g}")
    return "\n".join(lines) + "\n"


def _played(node: Manifest) -> bool:
    """A kwok GPU node whose GPUs are whole (MIG slices are ``nvidia.com/mig-*``)."""
    meta = node["metadata"]
    kwok = all((meta.get("annotations") or {}).get(k) == v for k, v in KWOK_NODE.items())
    capacity = (node.get("status") or {}).get("capacity") or {}
    return kwok and _quantity(capacity.get(GPU)) > 0


def _holds_gpus(pod: Manifest) -> bool:
    """Bound and holding GPUs: not being deleted, not finished."""
    if pod["metadata"].get("deletionTimestamp"):
        return False
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    return bool(_gpu_containers(pod))


def _gpu_containers(pod: Manifest) -> list[str]:
    """A container's name once per GPU it holds, containers in the pod's order."""
    names: list[str] = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        wanted = (resources.get("limits") or {}).get(GPU) or (
            resources.get("requests") or {}).get(GPU)
        names += [container["name"]] * _quantity(wanted)
    return names


def _annotation(pod: Manifest, key: str) -> str | None:
    value = (pod["metadata"].get("annotations") or {}).get(key)
    return str(value) if value is not None else None


def _driver(labels: Mapping[str, str]) -> str:
    parts = [labels.get(key) for key in DRIVER_LABELS]
    return ".".join(p for p in parts if p) if all(parts) else DEFAULT_DRIVER


def _quantity(value: Any) -> int:
    try:
        return max(0, int(str(value)))
    except ValueError:
        return 0


def _number(value: str | None, default: float) -> float:
    try:
        return float(value) if value is not None else default
    except ValueError:
        return default


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _ScrapeServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A scraper that hung up (its scrape timed out on a loaded machine) is not worth a
        # traceback on stderr per scrape; anything else still is.
        if isinstance(sys.exc_info()[1], ConnectionError):
            log.debug("scraper %s hung up", client_address)
            return
        super().handle_error(request, client_address)


class _Scrape(BaseHTTPRequestHandler):
    exporter: PlayedDcgmExporter
    timeout = 10  # a scraper that stalls holds its thread no longer than this

    def do_GET(self) -> None:
        if self.path.partition("?")[0] not in ("/metrics", "/"):
            self.send_error(404)
            return
        if not self.exporter._slots.acquire(blocking=False):
            self.send_error(503, "too many scrapes at once")
            return
        try:
            body = self.exporter.page()
        except Exception as error:  # the host unreachable: this scrape fails, the next tries
            log.warning("dcgm exporter: the host's nodes and pods not read: %s", error)
            self.send_error(503, "the host's nodes and pods could not be read")
            return
        finally:
            self.exporter._slots.release()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Scrapes every few seconds are not worth a line each."""
