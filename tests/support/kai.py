"""KAI Scheduler and kwok as processes against a real API server: a GPU host where pods are
really scheduled.

The five KAI programs (scheduler, binder, podgrouper, queuecontroller, podgroupcontroller) and
kwok come from ``make tools`` (``PORTAL_TOOLS_BIN``), KAI's CRDs from its module download
(``PORTAL_KAI_CRDS``). They run out of cluster, as KAI's own env tests do: the kubeconfig through
``KUBECONFIG``, each on ports of its own, webhooks off. kwok keeps the Nodes Ready and turns the
pods bound to them Running; nothing else runs a container.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from app.kube.port import Manifest
from tests.support.kube_server import ApiServer, install_crds, skip_unless_ci, tool
from tests.support.web import free_port

KAI_PROGRAMS = ("scheduler", "binder", "podgrouper", "queuecontroller", "podgroupcontroller")
SCHEDULER_NAME = "kai-scheduler"


def kai_crds() -> Path:
    folder = Path(os.environ.get("PORTAL_KAI_CRDS", ""))
    if not folder.is_dir() or not list(folder.glob("*.yaml")):
        skip_unless_ci("KAI Scheduler's CRDs are not in PORTAL_KAI_CRDS: `make tools` copies "
                       "them from its module download into .cache/kai-crds (`make pytest` sets "
                       "the variable)")
    return folder


def gpu_node(name: str, product: str, gpus: int, **labels: str) -> Manifest:
    """A Node as GPU Feature Discovery labels it, for kwok to keep Ready."""
    capacity = {"nvidia.com/gpu": str(gpus), "cpu": "96", "memory": "1Ti", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": name, "type": "kwok",
                                    "nvidia.com/gpu.product": product, **labels}},
            "status": {"capacity": capacity, "allocatable": capacity}}


@dataclass
class GpuScheduling:
    """kwok and KAI's programs on ``server``; ``stop()`` ends them (the server stays)."""

    server: ApiServer
    workdir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self) -> GpuScheduling:
        self.workdir.mkdir(parents=True, exist_ok=True)
        admin = self.server.adapter()
        try:
            for crd in sorted(kai_crds().glob("*.yaml")):
                install_crds(admin, crd)
        finally:
            admin.close()
        self.kubeconfig = self.server.write_admin_kubeconfig(self.workdir / "admin.kubeconfig")
        self.run("kwok", f"--kubeconfig={self.kubeconfig}", "--manage-all-nodes=true",
                 f"--server-address=127.0.0.1:{free_port()}")
        for program in KAI_PROGRAMS:
            self.start_program(program)
        return self

    def start_program(self, program: str) -> None:
        self.run(program, *self._flags(program))

    def _flags(self, program: str) -> list[str]:
        if program == "scheduler":
            # takes its kubeconfig from KUBECONFIG only
            return [f"--listen-address=127.0.0.1:{free_port()}",
                    f"--plugin-server-port={free_port()}", "--schedule-period=1s"]
        if program == "queuecontroller":  # no health probe; its metrics on a port of its own
            return [f"--kubeconfig={self.kubeconfig}", "--enable-webhook=false",
                    f"--metrics-listen-address=127.0.0.1:{free_port()}"]
        probes = ["--health-probe-bind-address=0", f"--kubeconfig={self.kubeconfig}"]
        if program == "podgroupcontroller":
            return [*probes, "--metrics-bind-address=0", "--enable-podgroup-webhook=false"]
        return [*probes, "--metrics-bind-address=0"]

    def run(self, program: str, *args: str) -> None:
        log = (self.workdir / f"{program}.log").open("ab")
        self.processes[program] = subprocess.Popen(
            [str(tool(program)), *args], stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)})
        log.close()

    def kill(self, program: str) -> None:
        """As a crash would: SIGKILL, nothing flushed."""
        self.processes[program].kill()
        self.processes[program].wait()

    def exited(self) -> dict[str, int]:
        """Programs that are no longer running, with their exit codes."""
        return {name: code for name, process in self.processes.items()
                if (code := process.poll()) is not None}

    def log(self, program: str) -> str:
        return (self.workdir / f"{program}.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
