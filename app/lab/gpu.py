"""KAI Scheduler and kwok as processes against a real API server: a GPU host where pods are
really scheduled.

The five KAI programs (scheduler, binder, podgrouper, queuecontroller, podgroupcontroller) and
kwok come from ``make tools`` (``.cache/bin``), KAI's CRDs from its module download
(``.cache/kai-crds``). They run out of cluster, as KAI's own env tests do: the kubeconfig through
``KUBECONFIG`` (the scheduler takes it from nowhere else), each on ports of its own, webhooks
off. kwok keeps the Nodes Ready and turns the pods bound to them Running; nothing else runs a
container.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.kube.port import Manifest
from app.lab.control_plane import ApiServer, install_crds
from app.lab.ports import free_port
from app.lab.processes import terminate_all

KAI_PROGRAMS = ("scheduler", "binder", "podgrouper", "queuecontroller", "podgroupcontroller")
SCHEDULER_NAME = "kai-scheduler"
# The annotation kwok's default selection reads: the nodes it keeps Ready and runs pods on.
KWOK_NODE = {"kwok.x-k8s.io/node": "fake"}


def gpu_node(name: str, product: str, gpus: int, **labels: str) -> Manifest:
    """A Node as GPU Feature Discovery labels it, for kwok to keep Ready."""
    capacity = {"nvidia.com/gpu": str(gpus), "cpu": "96", "memory": "1Ti", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": dict(KWOK_NODE),
                         "labels": {"kubernetes.io/hostname": name, "type": "kwok",
                                    "nvidia.com/gpu.product": product, **labels}},
            "status": {"capacity": capacity, "allocatable": capacity}}


@dataclass
class GpuScheduling:
    """kwok and KAI's programs on ``server``; ``stop()`` ends them (the server stays).

    ``all_nodes``: kwok manages every Node; otherwise only those annotated ``KWOK_NODE`` (the
    lab keeps a NotReady machine NotReady, and the pod runner's node its own)."""

    server: ApiServer
    workdir: Path
    programs: Path = Path()
    crds: Path = Path()
    all_nodes: bool = True
    # Turns a program's command line into one run elsewhere: KAI's podgroupcontroller always
    # listens on :8080 (it never passes --metrics-bind-address on), so the lab gives it a
    # network namespace of its own and a lab may run beside the suite's KAI.
    isolate: Callable[[str, list[str]], list[str]] | None = None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self) -> GpuScheduling:
        self.workdir.mkdir(parents=True, exist_ok=True)
        admin = self.server.adapter()
        try:
            for crd in sorted(self.crds.glob("*.yaml")):
                install_crds(admin, crd)
        finally:
            admin.close()
        self.kubeconfig = self.server.write_admin_kubeconfig(self.workdir / "admin.kubeconfig")
        self.start_program("kwok")
        for program in KAI_PROGRAMS:
            self.start_program(program)
        return self

    def start_program(self, program: str) -> None:
        self.run(program, *self._flags(program))

    def _flags(self, program: str) -> list[str]:
        if program == "kwok":
            selection = ("--manage-all-nodes=true" if self.all_nodes else
                         "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake")
            # Node leases renewed every 10 s: without them a node's only heartbeat is its status,
            # every 20-45 s, and the node controller (40 s of grace) takes nodes for dead.
            return [f"--kubeconfig={self.kubeconfig}", selection,
                    f"--server-address=127.0.0.1:{free_port()}",
                    "--node-lease-duration-seconds=40"]
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
        argv = [str(self.programs / program), *args]
        if self.isolate is not None:
            argv = self.isolate(program, argv)
        self.processes[program] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT,
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
        terminate_all(self.processes.values())
