"""KAI Scheduler and kwok of ``app.lab.gpu`` for tests: the programs and CRDs ``make tools``
built, or a skip (a failure in CI) when they are missing."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.kube.port import Manifest
from app.lab import gpu
from app.lab.gpu import KAI_PROGRAMS as KAI_PROGRAMS
from app.lab.gpu import SCHEDULER_NAME as SCHEDULER_NAME
from app.lab.gpu import gpu_node as gpu_node
from app.lab.gpu import mig_node as mig_node
from tests.support import slots
from tests.support.kube_server import ApiServer, skip_unless_ci, tool

# A module on KAI takes a few minutes; a suite keeps its own on one worker (tests/conftest.py).
PODGROUPCONTROLLER_WAIT = 900.0
ONE_WORKER = pytest.mark.xdist_group("kai-programs")


def kai_crds() -> Path:
    folder = Path(os.environ.get("PORTAL_KAI_CRDS", ""))
    if not folder.is_dir() or not list(folder.glob("*.yaml")):
        skip_unless_ci("KAI Scheduler's CRDs are not in PORTAL_KAI_CRDS: `make tools` copies "
                       "them from its module download into .cache/kai-crds (`make pytest` sets "
                       "the variable)")
    return folder


@dataclass
class GpuScheduling(gpu.GpuScheduling):
    def __post_init__(self) -> None:
        missing_skips = [tool(program) for program in ("kwok", *KAI_PROGRAMS)]
        self.programs = missing_skips[0].parent
        self.crds = kai_crds()


@contextmanager
def gpu_host(assets: Path, workdir: Path, name: str, product: str,
             nodes: dict[str, int], more_nodes: Sequence[Manifest] = ()
             ) -> Iterator[GpuScheduling]:
    """A host of its own whose GPU pods are scheduled for real: KAI and kwok, and ``nodes``
    (name: GPUs) of ``product``, and ``more_nodes`` as they are (a ``mig_node``); everything
    stops when the block ends. KAI's GPU sharing is on, its reservation pods answered by the
    lab's player."""
    # KAI's podgroupcontroller always binds :8080 (its metrics flag is read and never used):
    # one per machine outside a lab's network namespace, so another suite's waits its turn.
    with slots.exclusive("kai-podgroupcontroller-8080", timeout=PODGROUPCONTROLLER_WAIT):
        server = ApiServer(assets, workdir / "server", name=name, controllers=True)
        server.start()
        scheduling = GpuScheduling(server, workdir / "scheduling")
        try:
            scheduling.start()
            admin = server.adapter()
            for node, gpus in nodes.items():
                admin.apply(gpu_node(node, product, gpus), force=True)
            for built in more_nodes:
                admin.apply(built, force=True)
            admin.close()
            yield scheduling
        finally:
            scheduling.stop()
            server.stop()
