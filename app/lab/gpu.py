"""KAI Scheduler and kwok as processes against a real API server: a GPU host where pods are
really scheduled.

The five KAI programs (scheduler, binder, podgrouper, queuecontroller, podgroupcontroller) and
kwok come from ``make tools`` (``.cache/bin``), KAI's CRDs from its module download
(``.cache/kai-crds``). They run out of cluster, as KAI's own env tests do: the kubeconfig through
``KUBECONFIG`` (the scheduler takes it from nowhere else), each on ports of its own, webhooks
off. kwok keeps the Nodes Ready and turns the pods bound to them Running; nothing else runs a
container.

KAI's GPU sharing is on as ``global.gpuSharing`` turns it on for what runs here: the binder always
binds a ``gpu-fraction`` pod (the admission webhook, which alone reads that switch, does not run;
the portal's webhook gives share pods what it would). For each GPU it shares the binder creates a
reservation pod in ``kai-resource-reservation`` and waits for the device it reports; the
``ReservationPlayer`` (``app.lab.reservations``) reports one, as the reservation image would.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.kube.manifests.units import mig_g_count, mig_resource
from app.kube.port import Manifest
from app.lab.control_plane import ApiServer, install_crds
from app.lab.ports import free_port
from app.lab.processes import terminate_all
from app.lab.reservations import RESERVATION_NAMESPACE, ReservationPlayer, reservation_objects

KAI_PROGRAMS = ("scheduler", "binder", "podgrouper", "queuecontroller", "podgroupcontroller")
SCHEDULER_NAME = "kai-scheduler"
# The annotation kwok's default selection reads: the nodes it keeps Ready and runs pods on.
KWOK_NODE = {"kwok.x-k8s.io/node": "fake"}
# How long KAI's binder waits for a reservation pod's device (its own default, said out loud:
# the player answers within seconds, and a loaded machine must not make a bind fail silently).
RESERVATION_TIMEOUT_SECONDS = 40
A100_80GB = "NVIDIA-A100-SXM4-80GB"
# GPU memory in MiB as GPU Feature Discovery labels it (nvidia.com/gpu.memory), by product; KAI
# sizes a share from it (without it, 100 MiB a GPU).
GPU_MEMORY_MIB = {"NVIDIA-H100-80GB-HBM3": 81559, A100_80GB: 81920, "NVIDIA-H200": 143771,
                  "NVIDIA-L40S": 46068}
# What GPU Feature Discovery labels one MIG profile of an A100 80GB with (mixed strategy):
# memory in MiB, streaming multiprocessors.
A100_MIG_PROFILES = {"1g.10gb": (9728, 14), "2g.20gb": (19968, 28), "3g.40gb": (40192, 42),
                     "4g.40gb": (40192, 56), "7g.80gb": (80896, 98)}


def gpu_node(name: str, product: str, gpus: int, **labels: str) -> Manifest:
    """A Node as GPU Feature Discovery labels it, for kwok to keep Ready: its GPUs' count and
    memory too (KAI sizes shares of a GPU by them)."""
    capacity = {"nvidia.com/gpu": str(gpus), "cpu": "96", "memory": "1Ti", "pods": "110"}
    described = {"nvidia.com/gpu.count": str(gpus),
                 "nvidia.com/gpu.memory": str(GPU_MEMORY_MIB.get(product, 81920))}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": dict(KWOK_NODE),
                         "labels": {"kubernetes.io/hostname": name, "type": "kwok",
                                    "nvidia.com/gpu.product": product, **described, **labels}},
            "status": {"capacity": capacity, "allocatable": capacity}}


def mig_node(name: str, profiles: dict[str, int], *, gpus: int = 1,
             product: str = A100_80GB, **labels: str) -> Manifest:
    """An A100 80GB machine of ``gpus`` GPUs in MIG mode, mixed strategy, as GPU Feature
    Discovery and NVIDIA's device plugin describe it: no whole GPU (``nvidia.com/gpu: 0``), each
    profile's slices as ``nvidia.com/mig-<profile>`` (``profiles``: profile → slices on the
    machine), and GFD's per-profile labels. KAI takes it for a MIG node by those resources and
    keeps whole-GPU and share pods off it (mixed strategy)."""
    node = gpu_node(name, product, gpus, **{
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.family": "ampere",
        "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.config": _mig_config(profiles), **labels})
    for profile, slices in profiles.items():
        g_count = str(mig_g_count(profile))
        memory, multiprocessors = A100_MIG_PROFILES.get(
            profile, (int(profile.split(".")[1].removesuffix("gb")) * 1024, 14 * int(g_count)))
        node["metadata"]["labels"].update({
            f"nvidia.com/mig-{profile}.count": str(slices),
            f"nvidia.com/mig-{profile}.product": f"{product}-MIG-{profile}",
            f"nvidia.com/mig-{profile}.memory": str(memory),
            f"nvidia.com/mig-{profile}.multiprocessors": str(multiprocessors),
            f"nvidia.com/mig-{profile}.slices.gi": g_count,
            f"nvidia.com/mig-{profile}.slices.ci": g_count,
            f"nvidia.com/mig-{profile}.replicas": "1"})
    capacity = node["status"]["capacity"]
    capacity["nvidia.com/gpu"] = "0"
    capacity.update({mig_resource(profile): str(slices) for profile, slices in profiles.items()})
    return node


def _mig_config(profiles: dict[str, int]) -> str:
    """The mig-parted configuration a machine of these profiles was given by name."""
    return f"all-{next(iter(profiles))}" if len(profiles) == 1 else "all-balanced"


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
    reservations: ReservationPlayer | None = None

    def start(self) -> GpuScheduling:
        self.workdir.mkdir(parents=True, exist_ok=True)
        admin = self.server.adapter()
        try:
            for crd in sorted(self.crds.glob("*.yaml")):
                install_crds(admin, crd)
            # The binder's reservation pods run under this ServiceAccount, which the API
            # server's ServiceAccount admission wants to exist.
            for obj in reservation_objects():
                admin.apply(obj, force=True)
        finally:
            admin.close()
        self.kubeconfig = self.server.write_admin_kubeconfig(self.workdir / "admin.kubeconfig")
        self.start_program("kwok")
        for program in KAI_PROGRAMS:
            self.start_program(program)
        self.reservations = ReservationPlayer(self.server.admin_kubeconfig).start()
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
        if program == "binder":
            return [*probes, "--metrics-bind-address=0",
                    f"--resource-reservation-namespace={RESERVATION_NAMESPACE}",
                    f"--resource-reservation-allocation-timeout={RESERVATION_TIMEOUT_SECONDS}"]
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
        if self.reservations is not None:
            self.reservations.stop()
        terminate_all(self.processes.values())
